"""The on-disk kernel cache, the `python -m jitdl cache` CLI and export/load.

jitdl reads its settings (JITDL_CACHE, JITDL_CACHE_DIR, JITDL_CACHE_MAX_BYTES, JITDL_LOG)
at import, and a cache is about *later* processes, so almost everything here runs jitdl in
fresh subprocesses: a small driver script (CHILD) imports user modules written into
tmp_path (so they have source files), calls them on random inputs, compares with a float64
NumPy reference and prints one JSON line with the results and `cache_info()`.

To keep the file fast, one module-scoped fixture compiles the standard kernels once (a
cold process), and tests start from copies of that warm cache.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
import time

import pytest

PY = sys.executable
TIMEOUT = 180
HAVE_LD = shutil.which("ld") is not None
needs_ld = pytest.mark.skipif(not HAVE_LD, reason="no `ld` on PATH: kernels are not linked "
                                                   "into shared libraries here")

# ----------------------------------------------------------------------------- user code

KMOD = '''\
import jitdl as jd
import khelper

SCALE = 2.0


@jd.compute
def scaled(X):
    Y[i, j] = khelper.shift(X[i, j]) * SCALE
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
def matmul(A, B):
    (M, K), (_, N) = A.shape, B.shape
    k = jd.reduce_axis(K, name="k")
    return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")


def unrelated():
    return "v1"
'''

KHELPER = '''\
def shift(x):
    return x + 1.0
'''

SOFTMAX_REF = ("np.exp(X - X.max(1, keepdims=True)) / "
               "np.exp(X - X.max(1, keepdims=True)).sum(1, keepdims=True)")


def call(func, args, ref, module="kmod", seed=0):
    """One call for the child: func(*args) on random float32 data, checked against ref
    (a NumPy expression over the argument names, evaluated in float64)."""
    return {"module": module, "func": func, "args": [[n, list(s), "float32"] for n, s in args],
            "ref": ref, "seed": seed}


SCALED = call("scaled", [("X", (8, 16))], "(X + 1.0) * 2.0")
SOFTMAX = call("softmax", [("X", (8, 16))], SOFTMAX_REF)
MATMUL = call("matmul", [("A", (8, 12)), ("B", (12, 5))], "A @ B")
STANDARD = [SCALED, SOFTMAX, MATMUL]

# The driver run in every child process.
CHILD = '''\
import hashlib, importlib, json, os, sys, time
import numpy as np
import jitdl as jd

spec = json.loads(sys.argv[1])
if spec.get("barrier"):                  # start racing together
    open(spec["barrier"] + ".ready." + str(os.getpid()), "w").close()
    t0 = time.time()
    while not os.path.exists(spec["barrier"]) and time.time() - t0 < 60:
        time.sleep(0.002)
out = []
for c in spec["calls"]:
    f = getattr(importlib.import_module(c["module"]), c["func"])
    rng = np.random.default_rng(c["seed"])
    args = {n: rng.standard_normal(s).astype(dt) for n, s, dt in c["args"]}
    y = f(*args.values())
    ref = eval(c["ref"], {"np": np}, {n: a.astype(np.float64) for n, a in args.items()})
    err = float(np.max(np.abs(y - ref) / (1e-3 + np.abs(ref))))
    info = f.cache_info()
    last = info["events"][-1]
    out.append({"func": c["func"], "ok": bool(np.allclose(y, ref, rtol=1e-4, atol=1e-5)),
                "err": err, "shape": list(y.shape), "dtype": str(y.dtype),
                "sha": hashlib.sha256(np.ascontiguousarray(y).tobytes()).hexdigest(),
                "result": last["result"], "differs": last.get("differs"),
                "loader": last.get("loader"),
                "call": last["call"], "hits": info["hits"], "misses": info["misses"],
                "cache_dir": info["cache_dir"]})
print("RESULT " + json.dumps(out))
'''


# ----------------------------------------------------------------------------- helpers

def base_env(root, **extra):
    """A child environment: no inherited JITDL_* settings, the cache under root/cache and
    the tuning records in root (never the user's), root/mods first on PYTHONPATH, no
    bytecode files (an edited module is always re-read)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("JITDL_") and k != "PYTHONWARNINGS"}
    path = [str(root / "mods")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update(JITDL_CACHE_DIR=str(root / "cache"), PYTHONPATH=os.pathsep.join(path),
               JITDL_TUNING_DB=str(root / "tuning.sqlite"),
               PYTHONDONTWRITEBYTECODE="1", JITDL_LOG="cache", JITDL_NUM_THREADS="1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def write_module(root, name, text):
    d = root / "mods"
    d.mkdir(exist_ok=True)
    shutil.rmtree(d / "__pycache__", ignore_errors=True)
    (d / f"{name}.py").write_text(text)


def edit_module(root, name, old, new):
    path = root / "mods" / f"{name}.py"
    text = path.read_text()
    assert old in text, f"{old!r} not in {name}.py"
    write_module(root, name, text.replace(old, new))


class Child:
    def __init__(self, proc_or_result, results):
        self.rc = proc_or_result.returncode
        self.stdout = proc_or_result.stdout
        self.stderr = proc_or_result.stderr
        self.results = results

    def __getitem__(self, func):
        """The (last) result of the call of `func`."""
        hits = [r for r in self.results if r["func"] == func]
        assert hits, f"no call of {func} in {self.results}"
        return hits[-1]


def _parse(p):
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, \
        f"child failed (rc {p.returncode})\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return Child(p, json.loads(lines[-1][len("RESULT "):]))


def run_child(root, calls, **env):
    script = root / "child.py"
    if not script.exists():
        script.write_text(CHILD)
    p = subprocess.run([PY, str(script), json.dumps({"calls": calls})], cwd=str(root),
                       env=base_env(root, **env), capture_output=True, text=True,
                       timeout=TIMEOUT)
    return _parse(p)


def run_cli(root, *args, **env):
    p = subprocess.run([PY, "-m", "jitdl", "cache", *args], cwd=str(root),
                       env=base_env(root, **env), capture_output=True, text=True,
                       timeout=TIMEOUT)
    return p


def assert_all_ok(child):
    for r in child.results:
        assert r["ok"], f"{r['func']}: wrong result (max rel err {r['err']:.3g})\n" \
                        f"stderr:\n{child.stderr}"


def kernel_files(root):
    d = root / "cache" / "kernels"
    return sorted(p for p in d.iterdir() if p.name.endswith(".jdk")) if d.exists() else []


def alias_files(root):
    d = root / "cache" / "aliases"
    return sorted(p for p in d.iterdir() if p.name.endswith(".json")) if d.exists() else []


def kernel_of(root, func):
    """The kernel file that the alias of kmod.<func> points to (exactly one alias)."""
    recs = [json.loads(p.read_text()) for p in alias_files(root)]
    mine = [r for r in recs if r["fname"] == f"kmod.{func}"]
    assert len(mine) == 1, mine
    return root / "cache" / "kernels" / (mine[0]["full"] + ".jdk")


def alias_of(root, func):
    mine = [p for p in alias_files(root) if json.loads(p.read_text())["fname"] == f"kmod.{func}"]
    assert len(mine) == 1, mine
    return mine[0]


def miss_parts(stderr, func):
    """The key parts named by the JITDL_LOG=cache miss line of kmod.<func>."""
    m = re.findall(rf"jitdl\.cache: miss kmod\.{func} .*differs in: (.*)$", stderr, re.M)
    assert m, f"no 'miss ... differs in' line for {func} in stderr:\n{stderr}"
    return {p.strip() for p in m[-1].split(",")}


def leftovers(root):
    """Temporary files a writer left behind."""
    return [p.name for d in ("kernels", "aliases") if (root / "cache" / d).exists()
            for p in (root / "cache" / d).iterdir() if not p.name.endswith((".jdk", ".json"))]


# ----------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """mods/ with kmod + khelper and a cache filled by one cold process."""
    root = tmp_path_factory.mktemp("template")
    write_module(root, "kmod", KMOD)
    write_module(root, "khelper", KHELPER)
    cold = run_child(root, STANDARD)
    return root, cold


@pytest.fixture
def warm(template, tmp_path):
    """A private copy of the template: modules, driver and warm cache (mtimes kept)."""
    src, cold = template
    for name in ("mods", "cache"):
        shutil.copytree(src / name, tmp_path / name, symlinks=True)
    return tmp_path, cold


# ----------------------------------------------------------------------------- cold / warm

def test_cold_process_compiles_and_stores(template):
    root, cold = template
    assert_all_ok(cold)
    for r in cold.results:
        assert (r["misses"], r["hits"], r["result"]) == (1, 0, "compiled"), r
        assert r["cache_dir"] == str(root / "cache")
    assert len(kernel_files(root)) == 3
    assert len(alias_files(root)) == 3
    assert "jitdl.cache: miss kmod.matmul A: float32[8, 12], B: float32[12, 5]" in cold.stderr


def test_warm_process_hits_with_the_same_numbers(warm):
    root, cold = warm
    before = {p.name: p.read_bytes() for p in kernel_files(root)}
    hot = run_child(root, STANDARD)
    assert_all_ok(hot)
    for r, c in zip(hot.results, cold.results):
        assert (r["hits"], r["misses"], r["result"]) == (1, 0, "hit"), r
        assert r["sha"] == c["sha"], f"{r['func']}: warm result differs from the cold one"
    assert "jitdl.cache: hit kmod.softmax X: float32[8, 16]" in hot.stderr
    assert "miss" not in hot.stderr and "Warning" not in hot.stderr, hot.stderr
    assert (root / "cache" / "stats.sqlite").exists()      # hit counts
    # the cold process linked each kernel into a shared library before it exited, and
    # the warm one loaded those with dlopen
    expected = "shared library" if HAVE_LD else "mcjit"
    assert [r["loader"] for r in hot.results] == [expected] * 3, hot.results
    # a hit writes no kernel and leaves no file behind
    assert {p.name: p.read_bytes() for p in kernel_files(root)} == before
    assert not [p.name for p in (root / "cache").iterdir() if p.name.startswith(".")]


def test_cache_disabled_never_touches_the_directory(tmp_path):
    write_module(tmp_path, "kmod", KMOD)
    write_module(tmp_path, "khelper", KHELPER)
    for _ in range(2):
        ch = run_child(tmp_path, [SCALED, MATMUL], JITDL_CACHE="0")
        assert_all_ok(ch)
        for r in ch.results:
            assert (r["result"], r["misses"], r["cache_dir"]) == ("compiled", 1, None), r
    assert not (tmp_path / "cache").exists()


# ----------------------------------------------------------------------------- invalidation

def test_editing_a_helper_in_another_module_invalidates(warm):
    root, _ = warm
    edit_module(root, "khelper", "return x + 1.0", "return x * 3.0 + 1.0")
    ch = run_child(root, [dict(SCALED, ref="(X * 3.0 + 1.0) * 2.0"), SOFTMAX, MATMUL])
    assert_all_ok(ch)
    assert ch["scaled"]["result"] == "compiled" and ch["scaled"]["misses"] == 1
    assert miss_parts(ch.stderr, "scaled") == {"dependencies"}
    # the other definitions do not read khelper
    assert ch["softmax"]["result"] == ch["matmul"]["result"] == "hit"


def test_changing_a_global_constant_invalidates(warm):
    root, _ = warm
    edit_module(root, "kmod", "SCALE = 2.0", "SCALE = 5.0")
    ch = run_child(root, [dict(SCALED, ref="(X + 1.0) * 5.0"), MATMUL])
    assert_all_ok(ch)
    assert ch["scaled"]["result"] == "compiled"
    assert "dependencies" in miss_parts(ch.stderr, "scaled")
    assert ch["matmul"]["result"] == "hit"


def test_editing_an_unrelated_function_keeps_hits(warm):
    root, cold = warm
    edit_module(root, "kmod", 'return "v1"', 'return "v2 (edited)"  # and a comment')
    ch = run_child(root, STANDARD)
    assert_all_ok(ch)
    for r, c in zip(ch.results, cold.results):
        assert r["result"] == "hit" and r["sha"] == c["sha"], r


def test_editing_the_definition_invalidates_source(warm):
    root, _ = warm
    edit_module(root, "kmod", "* SCALE\n", "* SCALE - 0.5\n")
    ch = run_child(root, [dict(SCALED, ref="(X + 1.0) * 2.0 - 0.5"), SOFTMAX])
    assert_all_ok(ch)
    assert ch["scaled"]["result"] == "compiled"
    assert miss_parts(ch.stderr, "scaled") == {"source"}
    assert ch["softmax"]["result"] == "hit"


def test_a_new_shape_is_a_miss_on_args(warm):
    root, _ = warm
    ch = run_child(root, [call("scaled", [("X", (5, 7))], "(X + 1.0) * 2.0"), SCALED])
    assert_all_ok(ch)
    assert ch.results[0]["result"] == "compiled" and ch.results[0]["shape"] == [5, 7]
    assert miss_parts(ch.stderr, "scaled") == {"args"}
    assert ch.results[1]["result"] == "hit"
    assert len(kernel_files(root)) == 4


def test_cache_info_names_the_differing_part(warm):
    root, _ = warm
    edit_module(root, "khelper", "return x + 1.0", "return x + 2.0")
    ch = run_child(root, [dict(SCALED, ref="(X + 2.0) * 2.0")])
    assert ch["scaled"]["result"] == "compiled"
    assert "dependencies" in ch["scaled"]["differs"], ch["scaled"]["differs"]


def test_changing_a_dict_global_invalidates(tmp_path):
    src = textwrap.dedent('''\
        import jitdl as jd
        PARAMS = {"scale": 2.0}

        @jd.compute
        def scaled(X):
            Y[i] = X[i] * PARAMS["scale"]
            return Y
        ''')
    write_module(tmp_path, "kmod", src)
    run_child(tmp_path, [call("scaled", [("X", (9,))], "X * 2.0")])
    edit_module(tmp_path, "kmod", '"scale": 2.0', '"scale": 3.0')
    ch = run_child(tmp_path, [call("scaled", [("X", (9,))], "X * 3.0")])
    assert ch["scaled"]["ok"] and ch["scaled"]["result"] == "compiled"


def test_changing_a_value_nested_past_what_the_key_reads_invalidates(tmp_path):
    """The fast key reads containers 20 levels deep and wrote "..." below: a constant in
    a list 25 deep changed in the next process kept the key, a hit that computed the old
    value. Such a definition has no fast key now; its loop IR (which holds the value)
    finds the kernel, so the same value is still a hit without LLVM."""
    src = textwrap.dedent('''\
        import jitdl as jd

        def nest(v, depth):
            for _ in range(depth):
                v = [v]
            return v

        def inner(c):
            while isinstance(c, list):
                c = c[0]
            return c

        DEEP = nest(2.0, 25)

        @jd.compute
        def scaled(X):
            Y[i] = X[i] * inner(DEEP)
            return Y
        ''')
    write_module(tmp_path, "kmod", src)
    ch = run_child(tmp_path, [call("scaled", [("X", (9,))], "X * 2.0")])
    assert ch["scaled"]["ok"] and ch["scaled"]["result"] == "compiled"
    edit_module(tmp_path, "kmod", "nest(2.0, 25)", "nest(3.0, 25)")
    ch = run_child(tmp_path, [call("scaled", [("X", (9,))], "X * 3.0")])
    assert ch["scaled"]["ok"] and ch["scaled"]["result"] == "compiled", ch["scaled"]
    ch = run_child(tmp_path, [call("scaled", [("X", (9,))], "X * 3.0")])
    assert ch["scaled"]["ok"] and ch["scaled"]["result"] == "hit (same loop IR)", ch["scaled"]


def test_globals_spelled_like_index_notations_names_are_not_in_the_key(tmp_path):
    """The fast key read the globals named by the code Python compiles, in which the
    targets and indices of index notation (`Y[i] = ...`, `sum(... for k in ...)`) are
    global names: a notebook's `Y = f(X)` or loop variable `i` changed between processes
    made another key each time (traced and lowered again, and one more alias file). The
    names of the rewritten code are read now; a global read outside the statements that
    make it an index (`+ i` below) is still in the key."""
    src = textwrap.dedent('''\
        import jitdl as jd
        i = 1.0
        Y = [0.5]
        k = 7

        @jd.compute
        def summed(X):
            n, m = X.shape
            Y[i] = sum(X[i, k] for k in range(m))
            return Y

        @jd.compute
        def shifted(X):
            Y[j] = X[j] * 2.0
            Z[j] = Y[j] + i
            return Z
        ''')
    write_module(tmp_path, "kmod", src)

    def calls(shift):
        return [call("summed", [("X", (5, 6))], "X.sum(1)"),
                call("shifted", [("X", (9,))], f"X * 2.0 + {shift}")]
    ch = run_child(tmp_path, calls(1.0))
    assert all(r["ok"] and r["result"] == "compiled" for r in ch.results), ch.results
    edit_module(tmp_path, "kmod", "Y = [0.5]", "Y = [0.25]")
    edit_module(tmp_path, "kmod", "k = 7", "k = 8")
    ch = run_child(tmp_path, calls(1.0))
    assert all(r["ok"] and r["result"] == "hit" for r in ch.results), ch.results
    edit_module(tmp_path, "kmod", "i = 1.0", "i = 3.0")
    ch = run_child(tmp_path, calls(3.0))
    assert ch["summed"]["ok"] and ch["summed"]["result"] == "hit", ch["summed"]
    assert ch["shifted"]["ok"] and ch["shifted"]["result"] == "compiled", ch["shifted"]
    assert miss_parts(ch.stderr, "shifted") == {"dependencies"}


def test_changing_what_a_function_in_a_container_reads_invalidates(tmp_path):
    """A function held in a global container (a dict of activations, a list, an object's
    attribute) was keyed by its code alone: a global it reads, its closure's value or a
    partial's argument changed in the next process was a hit that computed the old
    values. It is read now as a global function is."""
    src = textwrap.dedent('''\
        import functools
        import jitdl as jd
        SCALE = 2.0

        def make(c):
            return lambda x: x * c

        def times(x, c):
            return x * c

        class Box:
            def __init__(self, fn):
                self.fn = fn

        OPS = {"glob": lambda x: x * SCALE, "cell": make(3.0)}
        PARTS = [functools.partial(times, c=4.0)]
        BOX = Box(make(5.0))

        @jd.compute
        def by_global(X):
            Y[i] = OPS["glob"](X[i])
            return Y

        @jd.compute
        def by_cell(X):
            Y[i] = OPS["cell"](X[i])
            return Y

        @jd.compute
        def by_partial(X):
            Y[i] = PARTS[0](X[i])
            return Y

        @jd.compute
        def by_object(X):
            Y[i] = BOX.fn(X[i])
            return Y
        ''')
    write_module(tmp_path, "kmod", src)
    names = ["by_global", "by_cell", "by_partial", "by_object"]

    def calls(*factors):
        return [call(n, [("X", (9,))], f"X * {c}") for n, c in zip(names, factors)]
    ch = run_child(tmp_path, calls(2.0, 3.0, 4.0, 5.0))
    assert all(r["ok"] and r["result"] == "compiled" for r in ch.results), ch.results
    for old, new in (("SCALE = 2.0", "SCALE = 6.0"), ("make(3.0)", "make(7.0)"),
                     ("c=4.0", "c=8.0"), ("make(5.0)", "make(9.0)")):
        edit_module(tmp_path, "kmod", old, new)
    ch = run_child(tmp_path, calls(6.0, 7.0, 8.0, 9.0))
    for r in ch.results:
        assert r["ok"] and r["result"] == "compiled", r
        assert miss_parts(ch.stderr, r["func"]) == {"dependencies"}
    ch = run_child(tmp_path, calls(6.0, 7.0, 8.0, 9.0))
    assert all(r["ok"] and r["result"] == "hit" for r in ch.results), ch.results


def test_changing_a_class_attribute_read_through_a_subclass_or_instance_invalidates(
        tmp_path):
    """A class entered the fast key with its own attributes only, and an object of a
    user's class with its instance attributes and methods: `Cfg.scale` that Cfg inherits
    from its base, or `H.factor` that H's class holds, edited for the next process was a
    hit that computed with the old value. Both read the class's attributes now, its
    bases' included (a class attribute holding an instance of it is read once)."""
    src = textwrap.dedent('''\
        import jitdl as jd

        class Base:
            scale = 2.0

        class Cfg(Base):
            pass

        class Holder:
            factor = 3.0

        Holder.default = Holder()
        H = Holder()
        LIST = [Holder()]

        @jd.compute
        def inherited(X):
            Y[i] = X[i] * Cfg.scale
            return Y

        @jd.compute
        def of_instance(X):
            Y[i] = X[i] * H.factor
            return Y

        @jd.compute
        def in_a_list(X):
            Y[i] = X[i] * LIST[0].factor
            return Y
        ''')
    write_module(tmp_path, "kmod", src)
    names = ["inherited", "of_instance", "in_a_list"]

    def calls(*factors):
        return [call(n, [("X", (9,))], f"X * {c}") for n, c in zip(names, factors)]
    ch = run_child(tmp_path, calls(2.0, 3.0, 3.0))
    assert all(r["ok"] and r["result"] == "compiled" for r in ch.results), ch.results
    edit_module(tmp_path, "kmod", "scale = 2.0", "scale = 5.0")
    edit_module(tmp_path, "kmod", "factor = 3.0", "factor = 7.0")
    ch = run_child(tmp_path, calls(5.0, 7.0, 7.0))
    for r in ch.results:
        assert r["ok"] and r["result"] == "compiled", r
        assert miss_parts(ch.stderr, r["func"]) == {"dependencies"}
    ch = run_child(tmp_path, calls(5.0, 7.0, 7.0))
    assert all(r["ok"] and r["result"] == "hit" for r in ch.results), ch.results


REPL_CODE = '''\
import json
import numpy as np
import jitdl as jd

def helper(x):
    return x * %(c)s

class K:
    s = %(c)s

@jd.compute
def by_helper(X):
    return jd.tensor(X.shape, lambda i: helper(X[i]))

@jd.compute
def by_class(X):
    return jd.tensor(X.shape, lambda i: X[i] * K.s)

x = np.random.default_rng(0).standard_normal(9)
print("RESULT " + json.dumps([
    {"func": f.__name__, "ok": bool(np.allclose(f(x), x * %(c)s, rtol=1e-12)),
     "result": f.cache_info()["events"][-1]["result"]} for f in (by_helper, by_class)]))
'''


def test_a_helper_or_class_of_code_without_a_file_enters_the_key_by_its_code(tmp_path):
    """Code with no file behind it (the REPL's `<stdin>`, `python -c`, exec) was taken for
    a library's: a helper function entered the key by its name alone, so the next session
    with the helper edited was a disk-cache hit computing the old helper; a class of such
    a `__main__` made the key raise OSError('source code not available') at the call.
    Both are read by their code and attributes now."""
    def run(c):
        p = subprocess.run([PY, "-c", REPL_CODE % {"c": c}], cwd=str(tmp_path),
                           env=base_env(tmp_path), capture_output=True, text=True,
                           timeout=TIMEOUT)
        return _parse(p).results
    assert [(r["ok"], r["result"]) for r in run(2.0)] == [(True, "compiled")] * 2
    assert [(r["ok"], r["result"]) for r in run(3.0)] == [(True, "compiled")] * 2
    assert [(r["ok"], r["result"]) for r in run(3.0)] == [(True, "hit")] * 2


def test_changing_a_constant_deep_in_the_users_package_invalidates(tmp_path):
    """Modules were read three deep only: `pkg.a.b.c.SCALE` (a submodule of the user's
    own package, four dots from the name the definition reads) edited for the next
    process was a disk-cache hit computing with the old value. The user's modules are
    read to any depth now (each once along a path: `pkg.a.b.c.pkg` does not loop)."""
    d = tmp_path / "mods" / "pkg" / "a" / "b" / "c"
    d.mkdir(parents=True)
    for p in (d.parent.parent.parent, d.parent.parent, d.parent):
        (p / "__init__.py").write_text("")
    (d / "__init__.py").write_text("import pkg\nSCALE = 2.0\n")
    write_module(tmp_path, "kmod", textwrap.dedent('''\
        import jitdl as jd
        import pkg.a.b.c

        @jd.compute
        def scaled(X):
            Y[i] = X[i] * pkg.a.b.c.SCALE
            return Y
        '''))
    ch = run_child(tmp_path, [call("scaled", [("X", (9,))], "X * 2.0")])
    assert ch["scaled"]["ok"] and ch["scaled"]["result"] == "compiled"
    (d / "__init__.py").write_text("import pkg\nSCALE = 3.0\n")
    ch = run_child(tmp_path, [call("scaled", [("X", (9,))], "X * 3.0")])
    assert ch["scaled"]["ok"] and ch["scaled"]["result"] == "compiled", ch.results
    assert miss_parts(ch.stderr, "scaled") == {"dependencies"}
    ch = run_child(tmp_path, [call("scaled", [("X", (9,))], "X * 3.0")])
    assert ch["scaled"]["ok"] and ch["scaled"]["result"] == "hit"


def test_a_constant_of_a_users_module_read_by_a_helper_given_it_invalidates(tmp_path):
    """A module's attributes were read for the names of the function that named the
    module only: `scale(cfg, x)` reading `mod.SCALE` of the module it is given, or
    `getattr(cfg, "SCALE")`, was a hit with the old value in the next process after
    SCALE was edited. A user's module is read now for the names and attribute strings
    of every function of the user's that the key reads."""
    write_module(tmp_path, "kcfg", "SCALE = 2.0\nOFFSET = 1.0\n")
    write_module(tmp_path, "kmod", textwrap.dedent('''\
        import jitdl as jd
        import kcfg

        def scale(mod, x):
            return x * mod.SCALE

        @jd.compute
        def given(X):
            Y[i] = scale(kcfg, X[i])
            return Y

        @jd.compute
        def by_string(X):
            Y[i] = X[i] + getattr(kcfg, "OFFSET")
            return Y
        '''))

    def calls(s, o):
        return [call("given", [("X", (9,))], f"X * {s}"),
                call("by_string", [("X", (9,))], f"X + {o}")]
    ch = run_child(tmp_path, calls(2.0, 1.0))
    assert all(r["ok"] and r["result"] == "compiled" for r in ch.results), ch.results
    write_module(tmp_path, "kcfg", "SCALE = 3.0\nOFFSET = 4.0\n")
    ch = run_child(tmp_path, calls(3.0, 4.0))
    for r in ch.results:
        assert r["ok"] and r["result"] == "compiled", r
        assert miss_parts(ch.stderr, r["func"]) == {"dependencies"}
    ch = run_child(tmp_path, calls(3.0, 4.0))
    assert all(r["ok"] and r["result"] == "hit" for r in ch.results), ch.results


def test_a_module_global_or_buffer_read_by_a_name_computed_or_imported_invalidates(
        tmp_path):
    """What a definition reads through a name it computes or imports was not in the key:
    `importlib.import_module("kcfg").SCALE`, `getattr(kcfg, NAME)` of a global string,
    `globals()["SCALE"]`, a helper's `import kcfg2` (kcfg2 imported by no one else) and
    a memoryview (keyed by its type) each kept the key after the value was edited, and
    the next process was a hit computing with the old value. Strings and string values
    naming a module of the user's now read it, globals() reads the module's globals for
    the names and strings of the user's functions, a user's module imported by the code
    and not imported yet gives no fast key, and a buffer enters by its bytes."""
    write_module(tmp_path, "kcfg", "SCALE = 2.0\nOFFSET = 1.0\n")
    write_module(tmp_path, "kcfg2", "W = 2.0\n")
    write_module(tmp_path, "kmod", textwrap.dedent('''\
        import importlib
        import jitdl as jd
        import kcfg

        SCALE = 2.0
        NAME = "OFF" + "SET"
        MV = memoryview(bytes([2]))

        def imported(x):
            import kcfg2
            return x * kcfg2.W

        @jd.compute
        def by_import_module(X):
            Y[i] = X[i] * importlib.import_module("kcfg").SCALE
            return Y

        @jd.compute
        def by_computed_name(X):
            Y[i] = X[i] + getattr(kcfg, NAME)
            return Y

        @jd.compute
        def by_globals(X):
            Y[i] = X[i] * globals()["SCALE"]
            return Y

        @jd.compute
        def by_import(X):
            Y[i] = imported(X[i])
            return Y

        @jd.compute
        def by_memoryview(X):
            Y[i] = X[i] * MV[0]
            return Y
        '''))

    def calls(v, w):
        return [call("by_import_module", [("X", (9,))], f"X * {v}"),
                call("by_computed_name", [("X", (9,))], f"X + {w}"),
                call("by_globals", [("X", (9,))], f"X * {v}"),
                call("by_import", [("X", (9,))], f"X * {v}"),
                call("by_memoryview", [("X", (9,))], f"X * {v}")]
    ch = run_child(tmp_path, calls(2.0, 1.0))
    assert all(r["ok"] and r["result"] == "compiled" for r in ch.results), ch.results
    write_module(tmp_path, "kcfg", "SCALE = 3.0\nOFFSET = 4.0\n")
    write_module(tmp_path, "kcfg2", "W = 3.0\n")
    edit_module(tmp_path, "kmod", "SCALE = 2.0", "SCALE = 3.0")
    edit_module(tmp_path, "kmod", "bytes([2])", "bytes([3])")
    ch = run_child(tmp_path, calls(3.0, 4.0))
    assert all(r["ok"] and r["result"] == "compiled" for r in ch.results), ch.results
    ch = run_child(tmp_path, calls(3.0, 4.0))
    assert all(r["ok"] for r in ch.results), ch.results
    # (kcfg2 is imported by the trace only: no fast key, found by its loop IR)
    assert [r["result"] for r in ch.results] == ["hit"] * 3 + ["hit (same loop IR)", "hit"]


def test_a_helpers_relative_import_or_import_of_a_submodule_invalidates(tmp_path):
    """A helper's `import kcfg` of a module imported by no one else gives no fast key
    (2018e93), but a relative import (`from .kcfg import SCALE`, `from . import kcfg`)
    was taken for an absolute one of "kcfg" (no such module) and `from kpkg import
    kcfg2` for kpkg only (imported: kcfg2, not yet, was not seen): editing the values
    kept the key, and the next process was a hit computing with the old ones."""
    d = tmp_path / "mods" / "kpkg"
    d.mkdir(parents=True)
    (d / "__init__.py").write_text("")
    (d / "kcfg.py").write_text("SCALE = 2.0\nOFFSET = 1.0\n")
    (d / "kcfg2.py").write_text("W = 2.0\n")
    (d / "kdef.py").write_text(textwrap.dedent('''\
        import jitdl as jd

        def relative(x):
            from .kcfg import SCALE
            return x * SCALE

        def relative_package(x):
            from . import kcfg
            return x + kcfg.OFFSET

        def submodule(x):
            from kpkg import kcfg2
            return x * kcfg2.W

        @jd.compute
        def by_relative(X):
            Y[i] = relative(X[i])
            return Y

        @jd.compute
        def by_relative_package(X):
            Y[i] = relative_package(X[i])
            return Y

        @jd.compute
        def by_submodule(X):
            Y[i] = submodule(X[i])
            return Y
        '''))

    def calls(v, w):
        return [call("by_relative", [("X", (9,))], f"X * {v}", module="kpkg.kdef"),
                call("by_relative_package", [("X", (9,))], f"X + {w}", module="kpkg.kdef"),
                call("by_submodule", [("X", (9,))], f"X * {v}", module="kpkg.kdef")]
    ch = run_child(tmp_path, calls(2.0, 1.0))
    assert all(r["ok"] and r["result"] == "compiled" for r in ch.results), ch.results
    (d / "kcfg.py").write_text("SCALE = 3.0\nOFFSET = 4.0\n")
    (d / "kcfg2.py").write_text("W = 3.0\n")
    ch = run_child(tmp_path, calls(3.0, 4.0))
    assert all(r["ok"] and r["result"] == "compiled" for r in ch.results), ch.results


def test_only_the_environment_variables_a_definition_names_are_in_the_key(tmp_path):
    """`os.getenv` and `os.environ` (the frozen module os) were read as the user's code,
    the whole environment with them: any variable set or changed (a shell's, a job's id)
    was another key, traced and lowered again ('hit (same loop IR)') in the next process.
    The standard library's frozen modules are libraries now, and the environment enters
    the key by the variables the user's code names."""
    write_module(tmp_path, "kmod", textwrap.dedent('''\
        import os
        import jitdl as jd

        @jd.compute
        def by_getenv(X):
            Y[i] = X[i] * float(os.getenv("KSCALE", "1.0"))
            return Y

        @jd.compute
        def by_environ(X):
            Y[i] = X[i] + float(os.environ.get("KOFFSET", "1.0"))
            return Y
        '''))

    def calls(v, w):
        return [call("by_getenv", [("X", (9,))], f"X * {v}"),
                call("by_environ", [("X", (9,))], f"X + {w}")]
    ch = run_child(tmp_path, calls(2.0, 3.0), KSCALE="2.0", KOFFSET="3.0")
    assert all(r["ok"] and r["result"] == "compiled" for r in ch.results), ch.results
    ch = run_child(tmp_path, calls(2.0, 3.0), KSCALE="2.0", KOFFSET="3.0", KOTHER="1")
    assert all(r["ok"] and r["result"] == "hit" for r in ch.results), ch.results
    ch = run_child(tmp_path, calls(4.0, 5.0), KSCALE="4.0", KOFFSET="5.0", KOTHER="1")
    assert all(r["ok"] and r["result"] == "compiled" for r in ch.results), ch.results


def test_fast_key_sees_attribute_names_in_a_tuple_constant_or_a_value(tmp_path,
                                                                        monkeypatch):
    """A user's module is read for the names its readers may ask of it, which counted a
    string constant but not one in a tuple constant (`for n in ("SCALE", "OFFSET"):
    getattr(kcfg, n)`) nor a name in a list the code reads (`getattr(kcfg, NAMES[0])`):
    editing SCALE kept the key, and the next process was a hit with the old value."""
    import importlib
    from jitdl.cache import keys
    (tmp_path / "kcfg_names.py").write_text("SCALE = 2.0\nOFFSET = 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    kcfg = importlib.import_module("kcfg_names")
    glob = {"kcfg": kcfg, "NAMES": ["OFFSET"], "WEIGHTS": {"SCALE": 1.0}}
    exec(textwrap.dedent("""
        def by_tuple(x):
            for n in ("SCALE",):
                x = x * getattr(kcfg, n)
            return x

        def by_list(x):
            return x + getattr(kcfg, NAMES[0])

        def by_dict_key(x):
            for n, w in WEIGHTS.items():
                x = x * getattr(kcfg, n) * w
            return x

        def by_nested_tuple(x):
            for n, w in (("SCALE", 2.0), ("X", 1.0)):
                x = x * getattr(kcfg, n) * w
            return x
        """), glob)
    fns = ("by_tuple", "by_list", "by_dict_key", "by_nested_tuple")
    before = [keys.code_digests(glob[f]) for f in fns]
    monkeypatch.setattr(kcfg, "SCALE", 3.0)
    monkeypatch.setattr(kcfg, "OFFSET", 4.0)
    after = [keys.code_digests(glob[f]) for f in fns]
    assert [b != a for b, a in zip(before, after)] == [True] * 4


def test_fast_key_of_many_strings_beside_a_users_module_looks_up_only_its_names(
        tmp_path, monkeypatch):
    """Each string a definition reads in a value is a name its user's modules are read
    for (cb85bac), and each was looked up in each such module with its warnings
    silenced: a helper reading kcfg and a list of 200000 words took 10 s more at each
    process's first call (0.5 s before). Only the names a module holds are looked up
    now, and a word naming one of them still follows its edits."""
    import importlib
    from jitdl.cache import keys
    (tmp_path / "kcfg_words.py").write_text("SCALE = 2.0\nOFFSET = 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    kcfg = importlib.import_module("kcfg_words")
    glob = {"kcfg": kcfg, "WORDS": [f"w{k}" for k in range(20000)] + ["SCALE"]}
    exec(textwrap.dedent("""
        def helper(x):
            return x * getattr(kcfg, WORDS[-1]) + len(WORDS)
        """), glob)
    looked_up = []
    real = keys._module_attr
    monkeypatch.setattr(keys, "_module_attr",
                        lambda m, a: looked_up.append(a) or real(m, a))
    before = keys.code_digests(glob["helper"])
    assert "SCALE" in looked_up and len(looked_up) < 100, len(looked_up)
    monkeypatch.setattr(kcfg, "SCALE", 3.0)
    assert keys.code_digests(glob["helper"]) != before


def test_fast_key_does_not_load_a_lazy_module_a_string_names(tmp_path, monkeypatch):
    """Each name and string of the user's code is looked up in sys.modules (2018e93),
    and a module there that importlib.util.LazyLoader has not loaded yet was loaded by
    the key's first look at it: its code ran at the user's call because a string
    matched its name, and where that code raised, the call raised it. It stays unloaded
    now (the user's: no fast key, as for a module not imported yet)."""
    import importlib.util
    from jitdl.cache import keys
    (tmp_path / "klazy_boom.py").write_text("raise RuntimeError('loaded')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = importlib.util.find_spec("klazy_boom")
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "klazy_boom", module)
    spec.loader.exec_module(module)
    glob = {}
    exec("def f(x):\n    return x * len('klazy_boom')\n", glob)
    assert keys._walk(glob["f"]).cut
    assert type(module) is importlib.util._LazyModule      # (not loaded)


def test_fast_key_sees_an_environment_variable_whose_name_is_no_identifier(monkeypatch):
    """The environment enters the key by the variables the user's code names (ba4bfee),
    counted among its string constants only where they looked like Python names: an
    edit of `os.environ.get("MY-SCALE")`'s variable kept the key (the next process a hit
    computing with the old value)."""
    from jitdl.cache import keys
    glob = {"os": os}
    exec("def f(x):\n    return x * float(os.environ.get('MY-SCALE', '1'))\n", glob)
    monkeypatch.setenv("MY-SCALE", "2")
    before = keys.code_digests(glob["f"])
    monkeypatch.setenv("MY-SCALE", "3")
    after = keys.code_digests(glob["f"])
    assert after != before
    monkeypatch.setenv("MY-OTHER", "3")                 # (another: the same key)
    assert keys.code_digests(glob["f"]) == after


def test_the_users_modules_that_import_each_other_are_read_once(tmp_path):
    """The walker read the user's modules once along a path only: seven modules of a
    package each importing the others, all read by a definition, were 96000 paths of
    parts (4 s at each first call; eight, ten times that). Each module is read once per
    key for the names read now, and an edit deep in it still changes the key."""
    import importlib
    from jitdl.cache import keys
    k = 7
    d = tmp_path / "ring"
    d.mkdir()
    (d / "__init__.py").write_text("")
    for i in range(k):
        (d / f"m{i}.py").write_text("".join(f"from ring import m{j}\n" for j in range(k)
                                            if j != i) + f"X = {i}.0\n")
    (tmp_path / "ringdef.py").write_text(
        "".join(f"from ring import m{i}\n" for i in range(k)) +
        "def f(X):\n    return X * (" + " + ".join(f"m{i}.X" for i in range(k)) + ")\n")
    sys.path.insert(0, str(tmp_path))
    try:
        mod = importlib.import_module("ringdef")
        w = keys._walk(mod.f)
        assert len(w.parts) < 200, len(w.parts)
        before = keys.code_digests(mod.f)
        sys.modules["ring.m6"].X = 60.0
        assert keys.code_digests(mod.f) != before
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == "ringdef" or n.split(".")[0] == "ring"]:
            del sys.modules[name]


def test_a_file_edited_after_its_import_does_not_poison_the_cache(tmp_path):
    """A definition is traced from its file's text as it is at the first call, the fast
    key digested the code Python compiled at the import: a process whose file was edited
    in between (an editor's save while a notebook runs) stored the edited definition's
    kernel under the key of the imported code, and a later process with the file as it
    was imported (the edit undone) hit it: X * 3.0 for `X[i] * 2.0`. The key has the
    text the trace reads (as captured, else as the file is now), without comments or
    positions."""
    src = textwrap.dedent('''\
        import jitdl as jd

        @jd.compute
        def scaled(X):
            Y[i] = X[i] * 2.0
            return Y
        ''')
    write_module(tmp_path, "kmod", src)
    code = ("import numpy as np, kmod\n"
            "t = open(kmod.__file__).read()\n"
            "open(kmod.__file__, 'w').write(t.replace('* 2.0', '* 3.0'))\n"
            "kmod.scaled(np.ones(9, np.float32))\n")
    p = subprocess.run([PY, "-c", code], cwd=str(tmp_path), env=base_env(tmp_path),
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    write_module(tmp_path, "kmod", src)
    ch = run_child(tmp_path, [call("scaled", [("X", (9,))], "X * 2.0")])
    assert ch["scaled"]["ok"] and ch["scaled"]["result"] == "compiled", ch.results
    ch = run_child(tmp_path, [call("scaled", [("X", (9,))], "X * 2.0")])
    assert ch["scaled"]["ok"] and ch["scaled"]["result"] == "hit"
    # a comment is no part of it
    edit_module(tmp_path, "kmod", "X[i] * 2.0\n", "X[i] * 2.0  # twice\n")
    ch = run_child(tmp_path, [call("scaled", [("X", (9,))], "X * 2.0")])
    assert ch["scaled"]["ok"] and ch["scaled"]["result"] == "hit"


def test_changing_a_class_or_module_in_a_container_invalidates(tmp_path):
    """A class or a module held in a global container (`{"c": Cfg}`, `[cfg_module]`) was
    keyed by its name alone: Cfg.scale or cfg_module.SCALE edited for the next process was
    a hit that computed the old value. Each is read now as a global class or module is."""
    src = textwrap.dedent('''\
        import jitdl as jd
        import kcfg

        class Cfg:
            scale = 2.0

        CLASSES = {"c": Cfg}
        MODS = [kcfg]

        @jd.compute
        def by_class(X):
            Y[i] = X[i] * CLASSES["c"].scale
            return Y

        @jd.compute
        def by_module(X):
            Y[i] = X[i] * MODS[0].SCALE
            return Y
        ''')
    write_module(tmp_path, "kmod", src)
    write_module(tmp_path, "kcfg", "SCALE = 3.0\n")
    names = ["by_class", "by_module"]

    def calls(*factors):
        return [call(n, [("X", (9,))], f"X * {c}") for n, c in zip(names, factors)]
    ch = run_child(tmp_path, calls(2.0, 3.0))
    assert all(r["ok"] and r["result"] == "compiled" for r in ch.results), ch.results
    edit_module(tmp_path, "kmod", "scale = 2.0", "scale = 6.0")
    edit_module(tmp_path, "kcfg", "SCALE = 3.0", "SCALE = 7.0")
    ch = run_child(tmp_path, calls(6.0, 7.0))
    for r in ch.results:
        assert r["ok"] and r["result"] == "compiled", r
        assert miss_parts(ch.stderr, r["func"]) == {"dependencies"}
    ch = run_child(tmp_path, calls(6.0, 7.0))
    assert all(r["ok"] and r["result"] == "hit" for r in ch.results), ch.results


def test_changing_a_property_of_a_users_class_invalidates(tmp_path):
    """A property of the user's class (`CFG.scale` where Cfg.scale is a property, or a
    functools.cached_property) entered the fast key as 'a property': its getter edited
    for the next process (return 3.0 for 2.0) was a hit computing the old value. Its
    functions are read now as the class's methods are."""
    src = textwrap.dedent('''\
        import functools
        import jitdl as jd

        class Cfg:
            @property
            def scale(self):
                return 2.0

            @functools.cached_property
            def shift(self):
                return 1.0

        CFG = Cfg()

        @jd.compute
        def by_property(X):
            Y[i] = X[i] * CFG.scale + CFG.shift
            return Y
        ''')
    write_module(tmp_path, "kmod", src)
    ch = run_child(tmp_path, [call("by_property", [("X", (9,))], "X * 2.0 + 1.0")])
    assert ch["by_property"]["ok"] and ch["by_property"]["result"] == "compiled"
    edit_module(tmp_path, "kmod", "return 2.0", "return 3.0")
    ch = run_child(tmp_path, [call("by_property", [("X", (9,))], "X * 3.0 + 1.0")])
    assert ch["by_property"]["ok"] and ch["by_property"]["result"] == "compiled", ch.results
    assert miss_parts(ch.stderr, "by_property") == {"dependencies"}
    edit_module(tmp_path, "kmod", "return 1.0", "return 4.0")
    ch = run_child(tmp_path, [call("by_property", [("X", (9,))], "X * 3.0 + 4.0")])
    assert ch["by_property"]["ok"] and ch["by_property"]["result"] == "compiled", ch.results
    ch = run_child(tmp_path, [call("by_property", [("X", (9,))], "X * 3.0 + 4.0")])
    assert ch["by_property"]["ok"] and ch["by_property"]["result"] == "hit"


def test_upgrading_an_installed_helper_package_invalidates(tmp_path):
    site = tmp_path / "site-packages"

    def install(version, body):
        shutil.rmtree(site, ignore_errors=True)
        (site / "hpkg").mkdir(parents=True)
        (site / "hpkg" / "__init__.py").write_text(f"def shift(x):\n    return {body}\n")
        dist = site / f"hpkg-{version}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: hpkg\n"
                                       f"Version: {version}\n")
    write_module(tmp_path, "kmod", textwrap.dedent('''\
        import jitdl as jd
        import hpkg

        @jd.compute
        def scaled(X):
            Y[i] = hpkg.shift(X[i])
            return Y
        '''))
    pp = os.pathsep.join([str(tmp_path / "mods"), str(site)] +
                         [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    install("1.0", "x + 1.0")
    run_child(tmp_path, [call("scaled", [("X", (9,))], "X + 1.0")], PYTHONPATH=pp)
    install("2.0", "x + 5.0")
    ch = run_child(tmp_path, [call("scaled", [("X", (9,))], "X + 5.0")], PYTHONPATH=pp)
    assert ch["scaled"]["ok"] and ch["scaled"]["result"] == "compiled"


# ----------------------------------------------------------------------------- races

def test_eight_processes_racing_on_the_same_keys(tmp_path):
    write_module(tmp_path, "kmod", KMOD)
    write_module(tmp_path, "khelper", KHELPER)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    barrier = tmp_path / "go"
    spec = json.dumps({"calls": STANDARD, "barrier": str(barrier)})
    procs = [subprocess.Popen([PY, str(script), spec], cwd=str(tmp_path),
                              env=base_env(tmp_path), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(8)]
    try:
        t0 = time.time()        # release them together once all have imported jitdl
        while len(list(tmp_path.glob("go.ready.*"))) < 8 and time.time() - t0 < 60:
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.01)
        barrier.touch()
        outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    children = [_parse(subprocess.CompletedProcess([], p.returncode, o, e))
                for p, (o, e) in zip(procs, outs)]
    for ch in children:
        assert_all_ok(ch)
        for r in ch.results:
            assert r["result"] in ("compiled", "hit", "hit (same loop IR)"), r
    # every process got the same numbers for each kernel
    for n in range(3):
        assert len({ch.results[n]["sha"] for ch in children}) == 1

    v = run_cli(tmp_path, "verify")
    assert v.returncode == 0, v.stdout + v.stderr
    assert "3 entries intact, 0 damaged" in v.stdout
    assert len(kernel_files(tmp_path)) == 3          # one file per distinct key
    assert len(alias_files(tmp_path)) == 3
    assert leftovers(tmp_path) == []
    again = run_child(tmp_path, STANDARD)
    assert_all_ok(again)
    assert [r["result"] for r in again.results] == ["hit"] * 3


# ----------------------------------------------------------------------------- corruption

def test_damaged_entries_warn_recompile_and_heal(warm):
    root, cold = warm
    trunc, flip = kernel_of(root, "scaled"), kernel_of(root, "softmax")
    data = trunc.read_bytes()
    trunc.write_bytes(data[:len(data) // 2])
    data = bytearray(flip.read_bytes())
    data[len(data) // 2] ^= 0xFF
    flip.write_bytes(bytes(data))

    v = run_cli(root, "verify")
    assert v.returncode == 1
    assert "1 entries intact, 2 damaged" in v.stdout
    assert trunc.stem in v.stdout and flip.stem in v.stdout

    ch = run_child(root, STANDARD)
    assert_all_ok(ch)
    assert "CacheWarning" in ch.stderr and "damaged" in ch.stderr
    assert trunc.name in ch.stderr and flip.name in ch.stderr
    assert "truncated" in ch.stderr and "checksum" in ch.stderr
    assert ch["scaled"]["result"] == ch["softmax"]["result"] == "compiled"
    assert ch["matmul"]["result"] == "hit"
    for r, c in zip(ch.results, cold.results):
        assert r["sha"] == c["sha"]

    v = run_cli(root, "verify")
    assert v.returncode == 0 and "3 entries intact, 0 damaged" in v.stdout, v.stdout
    healed = run_child(root, STANDARD)
    assert [r["result"] for r in healed.results] == ["hit"] * 3
    assert "Warning" not in healed.stderr


def test_an_empty_or_foreign_entry_is_a_miss(warm):
    root, _ = warm
    kernel_of(root, "scaled").write_bytes(b"")
    kernel_of(root, "matmul").write_bytes(b"NOTJITDL" + os.urandom(200))
    ch = run_child(root, STANDARD)
    assert_all_ok(ch)
    assert ch["scaled"]["result"] == ch["matmul"]["result"] == "compiled"
    assert "unknown format" in ch.stderr and "truncated header" in ch.stderr


def _entry(path):
    from jitdl.cache.store import unpack
    return unpack(path.read_bytes())


@needs_ld
def test_without_a_linker_mcjit_loads_and_a_later_process_links(tmp_path):
    write_module(tmp_path, "kmod", KMOD)
    write_module(tmp_path, "khelper", KHELPER)
    cold = run_child(tmp_path, STANDARD, JITDL_LINKER="0")
    assert_all_ok(cold)
    assert all(_entry(p).shared is None for p in kernel_files(tmp_path))

    plain = run_child(tmp_path, STANDARD, JITDL_LINKER="0")
    assert_all_ok(plain)
    assert [(r["result"], r["loader"]) for r in plain.results] == [("hit", "mcjit")] * 3
    assert all(_entry(p).shared is None for p in kernel_files(tmp_path))

    # a process that can link adds the libraries to the entries it hit (before it exits)
    upgrade = run_child(tmp_path, STANDARD)
    assert [(r["result"], r["loader"]) for r in upgrade.results] == [("hit", "mcjit")] * 3
    assert all(_entry(p).shared is not None for p in kernel_files(tmp_path))
    final = run_child(tmp_path, STANDARD)
    assert_all_ok(final)
    assert [r["loader"] for r in final.results] == ["shared library"] * 3
    for a, b in zip(final.results, cold.results):
        assert a["sha"] == b["sha"], f"{a['func']}: the library computes something else"
    assert not leftovers(tmp_path)


@needs_ld
def test_a_library_is_mapped_once_however_many_functions_load_it(warm):
    """Libraries are never unloaded: a Function re-created in a loop (a notebook cell run
    again) must reuse the one already loaded, not map it once more per hit."""
    root, _ = warm
    code = textwrap.dedent('''\
        import json, numpy as np, jitdl as jd, kmod
        X = np.random.default_rng().standard_normal((8, 16)).astype(np.float32)
        def maps():
            return sum(".load-" in line for line in open("/proc/self/maps"))
        loaders, ok = set(), True
        for _ in range(200):
            f = jd.compute(kmod.scaled.pyfunc)
            ok &= bool(np.allclose(f(X), (X.astype(np.float64) + 1) * 2, rtol=1e-6))
            loaders.add(f.cache_info()["events"][-1].get("loader"))
        print("RESULT " + json.dumps({"ok": ok, "maps": maps(), "loaders": sorted(loaders)}))
        ''')
    p = subprocess.run([PY, "-c", code], env=base_env(root), cwd=str(root),
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout.split("RESULT ", 1)[1])
    assert res["ok"] and res["loaders"] == ["shared library"], res
    assert res["maps"] <= 5, f"{res['maps']} mappings of loaded libraries after 200 loads"


@needs_ld
def test_a_library_that_does_not_load_falls_back_to_mcjit(warm):
    """A checksummed entry whose library the dynamic loader rejects (here: not an ELF
    file) is loaded through MCJIT from its object code: correct, and no crash."""
    from jitdl.cache.store import pack
    root, cold = warm
    path = kernel_of(root, "softmax")
    e = _entry(path)
    assert e.shared is not None and e.shared[:4] == b"\x7fELF"
    path.write_bytes(pack(e.meta, e.obj, dict(e.texts), b"\x7fELF" + os.urandom(300)))
    ch = run_child(root, STANDARD, JITDL_LOG="cache")
    assert_all_ok(ch)
    assert (ch["softmax"]["result"], ch["softmax"]["loader"]) == ("hit", "mcjit")
    assert ch["softmax"]["sha"] == cold["softmax"]["sha"]
    assert "cannot dlopen the cached library of kmod.softmax" in ch.stderr
    assert ch["matmul"]["loader"] == "shared library"


@needs_ld
def test_same_named_kernels_from_libraries_stay_apart(warm):
    """Two shapes of one function are two libraries exporting the same symbol; each call
    must run its own (RTLD_LOCAL, -Bsymbolic)."""
    root, _ = warm
    shapes = [(8, 16), (3, 5), (17, 2)]
    calls = [call("softmax", [("X", s)], SOFTMAX_REF, seed=i) for i, s in enumerate(shapes)]
    first = run_child(root, calls)
    assert_all_ok(first)
    again = run_child(root, calls + calls)
    assert_all_ok(again)
    assert [r["shape"] for r in again.results] == [list(s) for s in shapes] * 2
    assert [r["loader"] for r in again.results[:3]] == ["shared library"] * 3


@pytest.mark.parametrize("garbage", [
    b"\x00\xff not json {",
    b"[1, 2, 3]",
    b'"just a string"',
    b'{"fname": "kmod.scaled"}',
    b'{"full": "0000000000000000000000000000000000000000000000000000000000000000"}',
    b'{"full": 5}',
    b'{"full": ["a"]}',
])
def test_garbage_alias_is_a_miss_and_is_rewritten(warm, garbage):
    root, cold = warm
    alias = alias_of(root, "scaled")
    alias.write_bytes(garbage)
    ch = run_child(root, [SCALED])
    assert_all_ok(ch)
    # the kernel is still there: found again by its loop IR (or compiled), never a crash
    assert ch["scaled"]["result"] in ("hit (same loop IR)", "compiled")
    assert ch["scaled"]["sha"] == cold["scaled"]["sha"]
    assert json.loads(alias.read_bytes())["full"] == kernel_of(root, "scaled").stem
    assert run_child(root, [SCALED])["scaled"]["result"] == "hit"


# ----------------------------------------------------------------------------- permissions

@pytest.mark.parametrize("where", ["", "kernels"])
def test_a_group_writable_cache_dir_is_not_used(warm, where):
    root, _ = warm
    d = root / "cache" / where
    os.chmod(d, 0o777)
    before = sorted(p.name for p in (root / "cache").rglob("*"))
    ch = run_child(root, STANDARD)
    assert_all_ok(ch)
    for r in ch.results:
        assert r["result"] == "compiled" and r["cache_dir"] is None, r
    assert "CacheWarning" in ch.stderr and "not using the kernel cache" in ch.stderr
    assert "group or others can write it" in ch.stderr and str(d) in ch.stderr
    assert sorted(p.name for p in (root / "cache").rglob("*")) == before   # nothing written


def test_a_group_writable_entry_is_ignored_and_replaced(warm):
    root, cold = warm
    entry, alias = kernel_of(root, "scaled"), alias_of(root, "matmul")
    os.chmod(entry, 0o664)
    os.chmod(alias, 0o666)
    ch = run_child(root, STANDARD)
    assert_all_ok(ch)
    assert ch["scaled"]["result"] == "compiled"            # not loaded
    assert ch["matmul"]["result"] != "hit"                  # alias not trusted
    assert ch["softmax"]["result"] == "hit"
    assert "ignoring cache entry" in ch.stderr and "group or others can write it" in ch.stderr
    assert str(entry) in ch.stderr and str(alias) in ch.stderr
    # the rewrite replaced the files with private ones
    assert stat.S_IMODE(entry.stat().st_mode) & 0o022 == 0
    assert stat.S_IMODE(alias.stat().st_mode) & 0o022 == 0
    assert ch["scaled"]["sha"] == cold["scaled"]["sha"]


needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="chown to another uid needs root")


@needs_root
def test_an_entry_owned_by_another_user_is_ignored(warm):
    root, _ = warm
    entry, alias = kernel_of(root, "softmax"), alias_of(root, "matmul")
    os.chown(entry, 12345, 12345)
    os.chown(alias, 12345, 12345)
    ch = run_child(root, STANDARD)
    assert_all_ok(ch)
    assert ch["softmax"]["result"] == "compiled"
    assert ch["matmul"]["result"] != "hit"
    assert ch["scaled"]["result"] == "hit"
    assert "owned by uid 12345" in ch.stderr and str(entry) in ch.stderr
    assert entry.stat().st_uid == os.getuid()               # replaced by our own


@needs_root
def test_a_cache_dir_owned_by_another_user_is_not_used(warm):
    root, _ = warm
    os.chown(root / "cache", 12345, 12345)
    ch = run_child(root, STANDARD)
    assert_all_ok(ch)
    assert all(r["result"] == "compiled" and r["cache_dir"] is None for r in ch.results)
    assert "not using the kernel cache" in ch.stderr and "owned by uid 12345" in ch.stderr


# ----------------------------------------------------------------------------- eviction

def _filler(size_hint, store_pack):
    """A valid entry (so `verify` stays clean) of about size_hint bytes."""
    meta = {"fname": "filler", "call": "", "signature": {}}
    base = len(store_pack(meta, b"", {}))
    return store_pack(meta, b"\x90" * max(0, size_hint - base), {})


def test_eviction_removes_least_recently_used_first(warm):
    from jitdl.cache.store import pack
    root, _ = warm
    cap = 1 << 20
    kdir = root / "cache" / "kernels"
    A, B, C = kernel_of(root, "matmul"), kernel_of(root, "scaled"), kernel_of(root, "softmax")
    now = time.time()
    os.utime(A, (now - 2000, now - 2000))     # oldest on disk, but used next: then newest
    os.utime(B, (now - 1000, now - 1000))
    os.utime(C, (now - 900, now - 900))
    real = sum(p.stat().st_size for p in (A, B, C))
    room = cap - 1000 - real                  # the next new kernel pushes it over the cap
    fillers = []
    while room > 0:
        size = 16384 if room >= 2 * 16384 else room
        data = _filler(size, pack)
        p = kdir / (hashlib.sha256(f"filler{len(fillers)}".encode()).hexdigest() + ".jdk")
        p.write_bytes(data)
        os.utime(p, (now - 800 + len(fillers), now - 800 + len(fillers)))
        fillers.append(p)
        room -= len(data)
    before = {p.name for p in kernel_files(root)}
    assert cap - 2000 < sum(p.stat().st_size for p in kernel_files(root)) <= cap

    new_shape = call("scaled", [("X", (5, 7))], "(X + 1.0) * 2.0")
    ch = run_child(root, [MATMUL, new_shape], JITDL_CACHE_MAX_BYTES=cap)
    assert_all_ok(ch)
    assert ch["matmul"]["result"] == "hit" and ch.results[1]["result"] == "compiled"

    after = {p.name for p in kernel_files(root)}
    new = after - before
    removed = before - after
    assert len(new) == 1, "the new kernel was stored"
    assert sum(p.stat().st_size for p in kernel_files(root)) <= cap
    lru = [B.name, C.name] + [p.name for p in fillers] + [A.name]   # least recent first
    assert removed, "nothing was evicted"
    assert removed == set(lru[:len(removed)]), \
        f"evicted out of LRU order: removed {sorted(lru.index(n) for n in removed)}"
    assert A.name in after, "the entry used just before the write was evicted"

    # an evicted kernel is a quiet miss: recompiled, correct, no warning
    ch = run_child(root, [SCALED, MATMUL], JITDL_CACHE_MAX_BYTES=cap)
    assert_all_ok(ch)
    assert ch["scaled"]["result"] == "compiled" and ch["matmul"]["result"] == "hit"
    assert "Warning" not in ch.stderr, ch.stderr


# ----------------------------------------------------------------------------- export / load

EXMOD = '''\
import jitdl as jd


@jd.compute
def dense_relu(X, W, alpha):
    n, k = X.shape
    Y[i, j] = max(sum(X[i, r] * W[r, j] for r in range(k)) + alpha, 0.0)
    return Y
'''

LOADER = '''\
import json, os, sys
import numpy as np
import jitdl as jd
try:
    import exmod
    sys.exit("the source module is still importable")
except ModuleNotFoundError:
    pass
f = jd.load(sys.argv[1])
rng = np.random.default_rng(7)
X = rng.standard_normal((6, 10)).astype(np.float32)
W = rng.standard_normal((10, 4)).astype(np.float32)
ref = np.maximum(X.astype(np.float64) @ W.astype(np.float64) + 0.25, 0.0)
y = f(X, W, 0.25)
res = {"ok": bool(np.allclose(y, ref, rtol=1e-4, atol=1e-5)), "dtype": str(y.dtype),
       "nonzero": int((y > 0).sum()), "repr": repr(f),
       "loaders": sorted({type(k.loaded).__name__ for k in f._kernels.values()})}
for name, args in [("err_shape", (X[:5], W, 0.25)),
                   ("err_dtype", (X.astype(np.float64), W, 0.25))]:
    try:
        f(*args)
        res[name] = None
    except jd.ArgumentError as e:
        res[name] = str(e)
print("RESULT " + json.dumps(res))
'''


@pytest.mark.parametrize("linker", ["ld", "0"])
def test_export_and_load_without_source_or_cache(tmp_path, linker):
    if linker == "ld" and not HAVE_LD:
        pytest.skip("no `ld` on PATH: exports carry no shared library here")
    write_module(tmp_path, "exmod", EXMOD)
    path = tmp_path / "dense_relu.jdx"
    code = textwrap.dedent(f'''\
        import numpy as np, exmod
        X = np.ones((6, 10), np.float32); W = np.ones((10, 4), np.float32)
        exmod.dense_relu.export({str(path)!r}, X, W, 0.5)
        ''')
    p = subprocess.run([PY, "-c", code], env=base_env(tmp_path, JITDL_LINKER=linker),
                       cwd=str(tmp_path), capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert path.exists()

    shutil.rmtree(tmp_path / "mods")                         # the source is gone
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
    loader = tmp_path / "loader.py"
    loader.write_text(LOADER)
    p = subprocess.run([PY, str(loader), str(path)], env=base_env(tmp_path, JITDL_CACHE="0"),
                       cwd=str(tmp_path), capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(p.stdout.split("RESULT ", 1)[1])
    assert res["ok"] and res["dtype"] == "float32" and res["nonzero"] > 0, res
    # with a linker, the file carries a shared library and loading needs no LLVM
    assert res["loaders"] == (["SharedLoaded"] if linker == "ld" else ["Loaded"]), res
    assert "dense_relu" in res["repr"]
    for name in ("err_shape", "err_dtype"):
        msg = res[name]
        assert msg is not None, f"a call with another {name[4:]} did not raise ArgumentError"
        assert "dense_relu" in msg
        assert "float32[6, 10], float32[10, 4], float" in msg, msg    # what the file holds
    assert "float32[5, 10]" in res["err_shape"]
    assert "float64[6, 10]" in res["err_dtype"]
    assert not (tmp_path / "cache").exists()


def test_loading_a_damaged_export_raises(tmp_path):
    bad = tmp_path / "bad.jdx"
    bad.write_bytes(b"JITDLX01\x01\x00\x00\x00" + (100).to_bytes(8, "little") + b"x" * 100)
    code = textwrap.dedent(f'''\
        import jitdl as jd
        for p in ({str(bad)!r}, {str(tmp_path / "notjitdl")!r}):
            try:
                jd.load(p)
            except jd.JitdlError as e:
                print("ERR", e)
        ''')
    (tmp_path / "notjitdl").write_bytes(b"hello world")
    p = subprocess.run([PY, "-c", code], env=base_env(tmp_path, JITDL_CACHE="0"),
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    errs = [ln for ln in p.stdout.splitlines() if ln.startswith("ERR")]
    assert len(errs) == 2, p.stdout
    assert "damaged" in errs[0] and "not a jitdl export" in errs[1]


def test_an_exported_kernel_names_the_call_it_does_not_hold(tmp_path):
    """A call an export has no kernel for (another static value, an ndarray subclass) is
    an ArgumentError naming the call, the argument that differs from the nearest kernel,
    what the file holds and the caller's line (its message raised IndexError for a static
    argument and TypeError for np.matrix; it named neither argument nor line)."""
    code = textwrap.dedent(f'''\
        import numpy as np, jitdl as jd

        @jd.compute(static=("axis",))
        def total(X, axis):
            n, m = X.shape
            k = jd.reduce_axis(X.shape[axis])
            if axis == 0:
                return jd.tensor((m,), lambda j: jd.sum(X[k, j], axis=k))
            return jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k))
        x = np.random.default_rng(3).standard_normal((3, 4))
        f = jd.load(total.export({str(tmp_path / "total.jdx")!r}, x, 1))
        assert np.allclose(f(x, 1), x.sum(1), rtol=1e-12)
        for args in [(x, 0), (x, (1, 2.5)), (np.asmatrix(x), 1)]:
            try:
                f(*args)
            except jd.ArgumentError as e:
                print("ERR", e)
        ''')
    p = subprocess.run([PY, "-c", code], env=base_env(tmp_path), capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    errs = [ln[4:] for ln in p.stdout.splitlines() if ln.startswith("ERR")]
    assert errs == [f"total(): no exported kernel for arguments {shown}: argument {arg}, "
                    f"the nearest exported kernel takes {near}; the file holds: "
                    "(float64[3, 4], 1)" for shown, arg, near in (
                        ("(float64[3, 4], 0)", "'axis' is 0", "1"),
                        ("(float64[3, 4], (1, 2.5))", "'axis' is (1, 2.5)", "1"),
                        ("(matrix float64[3, 4], 1)", "'X' is matrix float64[3, 4]",
                         "float64[3, 4]"))], p.stdout
    # and the caller's line, as a Function's own errors give it
    assert p.stdout.count('File "<string>", line 15') == 3, p.stdout    # f(*args)


def test_an_exported_function_binds_its_arguments_by_name(tmp_path):
    """A loaded export takes its arguments by position or by the definition's parameter
    names; one left out or unknown is an ArgumentError saying so (a missing argument raised
    IndexError from the dispatch, a keyword TypeError, and lower() of a call the file
    does not hold a bare KeyError)."""
    code = textwrap.dedent(f'''\
        import numpy as np, jitdl as jd

        @jd.compute(static=("axis",))
        def total(X, axis):
            k = jd.reduce_axis(X.shape[axis])
            return jd.tensor((X.shape[1 - axis],), lambda i: jd.sum(X[i, k], axis=k))
        x = np.random.default_rng(3).standard_normal((3, 4))
        f = jd.load(total.export({str(tmp_path / "total.jdx")!r}, x, axis=1))
        assert np.allclose(f(x, axis=1), x.sum(1)) and np.allclose(f(X=x, axis=1), x.sum(1))
        assert "total" in f.lower(x, axis=1)
        for call in [lambda: f(x), lambda: f(x, 1, 2), lambda: f(x, 1, bogus=2),
                     lambda: f.lower(x, 0)]:
            try:
                call()
            except jd.ArgumentError as e:
                print("ERR", e)
        ''')
    p = subprocess.run([PY, "-c", code], env=base_env(tmp_path), capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    errs = [ln[4:] for ln in p.stdout.splitlines() if ln.startswith("ERR")]
    assert len(errs) == 4, p.stdout
    assert "'axis'" in errs[0] and "(X, axis)" in errs[0], errs[0]
    assert "takes 2 positional arguments but 3" in errs[1] and "'bogus'" in errs[2], errs
    assert "no exported kernel" in errs[3] and "(float64[3, 4], 0)" in errs[3], errs[3]


def test_an_exported_function_keeps_the_parameters_defaults(tmp_path):
    """`def total(X, axis=1)` exported and loaded took `axis` as required: g(x) was an
    ArgumentError 'missing a required argument'. The file keeps each parameter's kind and
    default (exactly: a float by its hex text, tuples), in the loaded function's
    signature; a default JSON cannot hold (an array) leaves that argument required."""
    code = textwrap.dedent(f'''\
        import inspect, pickle, numpy as np, jitdl as jd

        @jd.compute(static=("axis", "shift"))
        def total(X, axis=1, shift=(-0.0, 2), s=0.1, *, w=np.ones(2)):
            n, m = X.shape
            k = jd.reduce_axis(X.shape[axis])
            return jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k) * s + shift[1] + w[0])
        x = np.random.default_rng(3).standard_normal((3, 4))
        w = np.ones(2)
        want = x.sum(1) * 0.1 + 3
        g = jd.load(total.export({str(tmp_path / "total.jdx")!r}, x))
        print("SIG", inspect.signature(g))
        assert np.allclose(g(x, w=w), want) and np.allclose(g(x, 1, w=w), want)
        assert np.allclose(pickle.loads(pickle.dumps(g))(x, w=w), want)
        try:
            g(x)
        except jd.ArgumentError as e:
            print("ERR", e)
        ''')
    p = subprocess.run([PY, "-c", code], env=base_env(tmp_path), capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert "SIG (X, axis=1, shift=(-0.0, 2), s=0.1, *, w)\n" in p.stdout, p.stdout
    assert "ERR total() is missing the argument 'w'" in p.stdout, p.stdout


def test_an_export_with_a_default_it_cannot_keep_after_one_it_keeps_loads(tmp_path):
    """`def f(X, axis=1, s=np.float64(2.0))`: s's default (a NumPy scalar) is not kept, and
    the loaded signature had axis=1 before a required s, which inspect refuses: jd.load
    said the file 'is damaged: non-default argument follows default argument'. Such a
    positional parameter is required in the loaded function, as those before it."""
    code = textwrap.dedent(f'''\
        import inspect, numpy as np, jitdl as jd

        @jd.compute(static="axis")
        def f(X, axis=1, s=np.float64(2.0), t=3.0):
            return jd.numpy.sum(X, axis=axis) * s + t
        x = np.random.default_rng(4).standard_normal((3, 4))
        g = jd.load(f.export({str(tmp_path / "f.jdx")!r}, x, 1, 2.0))
        print("SIG", inspect.signature(g))
        assert np.allclose(g(x, 1, 2.0), x.sum(1) * 2 + 3)
        ''')
    p = subprocess.run([PY, "-c", code], env=base_env(tmp_path), capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert "SIG (X, axis, s, t=3.0)\n" in p.stdout, p.stdout


def test_a_loaded_export_pickles(tmp_path):
    """A loaded export goes to a process pool: it pickles as its file's bytes, loaded again
    on the other side (pickling raised AttributeError: Can't pickle local object
    'CDLL.__init__.<locals>._FuncPtr')."""
    code = textwrap.dedent(f'''\
        import pickle, numpy as np, jitdl as jd

        @jd.compute
        def twice(X):
            return jd.tensor(X.shape, lambda i: X[i] * 2.0)
        x = np.arange(5.0)
        f = jd.load(twice.export({str(tmp_path / "twice.jdx")!r}, x))
        g = pickle.loads(pickle.dumps(f))
        assert g is not f and (g(x) == x * 2).all() and "twice" in repr(g)
        print("ok")
        ''')
    p = subprocess.run([PY, "-c", code], env=base_env(tmp_path), capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr


def test_a_cache_dir_that_cannot_be_made_is_said_at_the_users_line(tmp_path):
    """The warning that the kernel cache is off pointed into jitdl (api.py's
    `store = default_store()`, export.py's for jd.load), not at the user's call."""
    (tmp_path / "afile").write_text("not a directory")
    path = str(tmp_path / "add.jdx")
    compile_and_export = textwrap.dedent(f'''\
        import numpy as np, jitdl as jd

        @jd.compute
        def add(A, B):
            return jd.tensor(A.shape, lambda i: A[i] + B[i])
        a = np.arange(5.0) + 0.5
        assert np.allclose(add(a, a), 2 * a)
        add.export({path!r}, a, a)
        ''')
    load = textwrap.dedent(f'''\
        import numpy as np, jitdl as jd
        a = np.arange(5.0) + 0.5
        assert np.allclose(jd.load({path!r})(a, a), 2 * a)
        ''')
    for code, line in ((compile_and_export, 7), (load, 3)):
        p = subprocess.run([PY, "-W", "always", "-c", code],
                           env=base_env(tmp_path, JITDL_CACHE_DIR=tmp_path / "afile"),
                           capture_output=True, text=True, timeout=TIMEOUT)
        assert p.returncode == 0, p.stderr
        assert f"<string>:{line}: CacheWarning: jitdl: kernel cache disabled: cannot " \
            "create" in p.stderr, p.stderr


def test_an_export_into_a_missing_directory_names_the_file(tmp_path):
    """The error of an export (or any atomic write) that cannot create its file names the
    path asked for, not the temporary file beside it ('.jitdl-export-n4n4e_ha')."""
    from jitdl.cache.store import write_atomic
    path = str(tmp_path / "nodir" / "k.jdx")
    with pytest.raises(FileNotFoundError) as e:
        write_atomic(path, b"x", prefix=".jitdl-export-")
    assert e.value.filename == path and path in str(e.value), str(e.value)
    # a directory in the file's place: the rename fails, and its error named the
    # temporary file too ('.../.jitdl-export-oyxp7vyz' -> path); nothing is left behind
    (tmp_path / "d").mkdir()
    with pytest.raises(IsADirectoryError) as e:
        write_atomic(str(tmp_path / "d"), b"x", prefix=".jitdl-export-")
    assert e.value.filename == str(tmp_path / "d") and "jitdl-export" not in str(e.value)
    assert not list(tmp_path.glob(".jitdl-export-*"))


# ----------------------------------------------------------------------------- CLI

def test_cli_info_list_verify_clear(warm):
    root, _ = warm
    run_child(root, STANDARD)                                # one hit each
    info = run_cli(root, "info")
    assert info.returncode == 0, info.stderr
    assert f"cache directory: {root / 'cache'}" in info.stdout
    assert re.search(r"entries:\s+3 \(0 damaged\)", info.stdout), info.stdout
    assert re.search(r"hits recorded:\s+3\b", info.stdout), info.stdout
    assert "JITDL_CACHE_MAX_BYTES" in info.stdout

    ls = run_cli(root, "list")
    assert ls.returncode == 0, ls.stderr
    rows = ls.stdout.splitlines()[1:]
    assert len(rows) == 3, ls.stdout
    for what in ("kmod.matmul(A: float32[8, 12], B: float32[12, 5])",
                 "kmod.softmax(X: float32[8, 16])", "kmod.scaled(X: float32[8, 16])"):
        row = [r for r in rows if what in r]
        assert row, f"{what} not listed:\n{ls.stdout}"
        assert row[0].split()[1] == "1", f"hit count of {what}: {row[0]}"

    v = run_cli(root, "verify")
    assert v.returncode == 0 and "3 entries intact, 0 damaged" in v.stdout

    victim = kernel_of(root, "softmax")
    victim.write_bytes(victim.read_bytes()[:-7])
    assert "<damaged>" in run_cli(root, "list").stdout
    assert re.search(r"entries:\s+3 \(1 damaged\)", run_cli(root, "info").stdout)
    v = run_cli(root, "verify", "--remove")
    assert v.returncode == 0, v.stdout
    assert "2 entries intact, 1 damaged (removed)" in v.stdout and victim.stem in v.stdout
    assert not victim.exists()

    c = run_cli(root, "clear")
    assert c.returncode == 0 and "removed 2 entries" in c.stdout, c.stdout
    assert kernel_files(root) == [] and alias_files(root) == []
    assert re.search(r"entries:\s+0 \(0 damaged\)", run_cli(root, "info").stdout)
    assert run_child(root, [SCALED])["scaled"]["result"] == "compiled"


def test_cli_with_the_cache_disabled(tmp_path):
    p = run_cli(tmp_path, "info", JITDL_CACHE="0")
    assert p.returncode == 1 and "disabled" in p.stdout
    assert not (tmp_path / "cache").exists()


def test_cli_reading_a_missing_cache_does_not_make_it(tmp_path):
    """`jitdl cache list` (info, verify, clear) of a cache directory that does not exist
    made it, with its kernels/ and aliases/ folders; they report an empty cache and leave
    the disk as it was."""
    for cmd in (["info"], ["list"], ["verify"], ["verify", "--remove"], ["clear"]):
        p = run_cli(tmp_path, *cmd)
        assert p.returncode == 0, (cmd, p.stdout, p.stderr)
        assert not (tmp_path / "cache").exists(), cmd
    assert "(not made yet)" in run_cli(tmp_path, "info").stdout
    (tmp_path / "cache").mkdir(mode=0o700)       # an empty one: no stats file made either
    assert run_cli(tmp_path, "list").returncode == 0
    assert list((tmp_path / "cache").iterdir()) == []


def test_on_off_settings_read_any_case_and_warn_on_other_values(tmp_path):
    """JITDL_WARM_UP=off (or OFF, False) left the warm-up on: only 0, false and no, in
    lower case, turned it off, where JITDL_CACHE also took off; a value that is neither
    on nor off (JITDL_CACHE=maybe) was taken as on without a word."""
    code = "import jitdl; s = jitdl.config.settings; print('GOT', s.cache, s.warm_up)"
    for env, want in [({"JITDL_WARM_UP": "OFF"}, "True False"),
                      ({"JITDL_WARM_UP": "False", "JITDL_CACHE": "No"}, "False False"),
                      ({"JITDL_CACHE": "maybe", "JITDL_WARM_UP": "Yes"}, "True True")]:
        p = subprocess.run([PY, "-c", code], capture_output=True, text=True,
                           env=base_env(tmp_path, **env), timeout=TIMEOUT)
        assert p.returncode == 0 and f"GOT {want}" in p.stdout, (env, p.stdout, p.stderr)
        assert ("JITDL_CACHE='maybe' is neither on" in p.stderr) == ("maybe" in str(env)), \
            p.stderr


@pytest.mark.parametrize("name", ["JITDL_CACHE_MAX_BYTES", "JITDL_NUM_THREADS",
                                  "JITDL_OPT_LEVEL", "JITDL_POOL_BYTES"])
def test_an_unreadable_integer_setting_is_a_warning_at_the_users_import(tmp_path, name):
    """JITDL_CACHE_MAX_BYTES=abc made `import jitdl` (and every `jitdl` command) fail with
    a traceback out of config.py; now a warning at the user's import line names the
    variable and its value, and the default is used."""
    (tmp_path / "script.py").write_text("import numpy\nimport jitdl\n"
                                        "print(jitdl.config.settings)\n")
    p = subprocess.run([PY, str(tmp_path / "script.py")], capture_output=True, text=True,
                       env=base_env(tmp_path, **{name: "abc"}), timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert f"script.py:2: RuntimeWarning: {name}='abc' is not an integer; using the " \
           f"default" in p.stderr, p.stderr
    c = run_cli(tmp_path, "info", **{name: "1e9"})
    assert c.returncode == 0 and "cache directory" in c.stdout, c.stderr
    assert f"{name}='1e9' is not an integer" in c.stderr, c.stderr


def test_an_integer_setting_out_of_its_range_is_a_warning(tmp_path):
    """JITDL_OPT_LEVEL=9, JITDL_NUM_THREADS=0, JITDL_CACHE_MAX_BYTES=5 were clamped to 3,
    1 and 1 MiB without a word; the warning names the variable, its range and the value
    used."""
    code = ("import jitdl; s = jitdl.config.settings\n"
            "print('GOT', s.opt_level, s.num_threads, s.cache_max_bytes, s.pool_bytes)\n")
    env = {"JITDL_OPT_LEVEL": "9", "JITDL_NUM_THREADS": "0", "JITDL_CACHE_MAX_BYTES": "5",
           "JITDL_POOL_BYTES": "-1"}
    p = subprocess.run([PY, "-c", code], capture_output=True, text=True,
                       env=base_env(tmp_path, **env), timeout=TIMEOUT)
    assert p.returncode == 0 and f"GOT 3 1 {1 << 20} 0" in p.stdout, p.stdout + p.stderr
    for text in ("JITDL_OPT_LEVEL='9' is outside the range it takes, 0..3; using 3",
                 "JITDL_NUM_THREADS='0' is outside the range it takes, 1..; using 1",
                 "JITDL_CACHE_MAX_BYTES='5' is outside the range it takes, 1048576..; using "
                 "1048576", "JITDL_POOL_BYTES='-1' is outside the range it takes, 0..; "
                 "using 0"):
        assert text in p.stderr, p.stderr


# ---------------------------------------------------------------- fast-key contents
# (in process: the digests must differ whenever the computation can differ)

def test_fast_key_sees_closures_partials_and_callable_objects():
    import functools
    from jitdl.cache import keys

    def make(c):
        def h(x):
            return x * c
        return h

    def mul(x, c):
        return x * c

    class Scale:
        def __init__(self, c):
            self.c = c

        def __call__(self, x):
            return x * self.c * FACTOR

    def digests(h):
        def f(X):
            return h(X)
        return keys.code_digests(f)

    assert digests(make(2.0)) != digests(make(3.0))
    assert digests(functools.partial(mul, c=2.0)) != digests(functools.partial(mul, c=3.0))
    assert digests(Scale(2.0)) != digests(Scale(3.0))
    global FACTOR
    before = digests(Scale(2.0))
    FACTOR = 7.0
    assert digests(Scale(2.0)) != before


def test_fast_key_sees_the_users_objects_inside_a_librarys_object():
    """A library's object in a value was keyed by its repr with the address cut out: a
    deque or a SimpleNamespace holding an object of the user's (`<Box object at 0x..>`)
    had the same key whatever the object held, so Box(3.0) in place of Box(2.0) in the
    next process was a hit computing with 2.0. Such an object is read by its items or
    attributes now."""
    import collections
    import types
    from jitdl.cache import keys

    class Box:
        def __init__(self, c):
            self.c = c

    def digests(v):
        def f(X):
            return X * v
        return keys.code_digests(f)

    for wrap in (lambda b: collections.deque([b]), lambda b: [types.SimpleNamespace(b=b)],
                 lambda b: {"q": collections.deque([b])}):
        assert digests(wrap(Box(2.0))) != digests(wrap(Box(3.0)))
        assert digests(wrap(Box(2.0))) == digests(wrap(Box(2.0)))
    loop = collections.deque()
    loop.append(loop)
    loop.append(Box(2.0))               # (a cycle through a library's object ends)
    assert digests(loop) == digests(loop)


def test_fast_key_sees_what_a_subclass_of_a_builtin_container_adds():
    """A subclass of dict, list or tuple was keyed by its items alone: `class Cfg(dict)`
    given an attribute (CFG.scale = 2.0, read as CFG.scale), a defaultdict's factory
    (D["s"] from `defaultdict(lambda: 2.0)`), a dict subclass's __missing__: edited to
    3.0, the next process was a hit computing with 2.0. Its attributes, factory and (the
    user's) class are read now."""
    import collections
    from jitdl.cache import keys

    def digests(v):
        def f(X):
            return X * v
        return keys.code_digests(f)

    def attributed(base, c):
        class Sub(base):
            pass
        x = Sub([1.0]) if base is not dict else Sub(a=1.0)
        x.scale = c
        return x

    def missing(c):
        class Cfg(dict):
            def __missing__(self, k):
                return c
        return Cfg(a=1.0)

    for make in (lambda c: attributed(dict, c), lambda c: attributed(list, c),
                 lambda c: collections.defaultdict(lambda: c),
                 lambda c: [collections.defaultdict(lambda: c)], missing):
        assert digests(make(2.0)) != digests(make(3.0))
        assert digests(make(2.0)) == digests(make(2.0))
    Point = collections.namedtuple("Point", "x y")
    assert digests(Point(1.0, 2.0)) != digests(Point(1.0, 3.0))
    assert digests(Point(1.0, 2.0)) == digests(Point(1.0, 2.0))
    loop = attributed(list, 2.0)
    loop.me = loop
    loop.append(loop)                   # (a cycle through it ends)
    assert digests(loop) == digests(loop)


def test_fast_key_sees_the_users_functions_a_librarys_wrapper_holds():
    """A library's function entered the key by its name and closure's reprs: a helper
    made with functools.singledispatch (a wrapper defined in functools) had one key
    whatever its body or its registered implementations computed, so `v * 3.0` in place
    of `v * 2.0` in the next process was a hit computing with 2.0. The user's functions
    such a wrapper holds are read now."""
    import functools
    from jitdl.cache import keys

    def digests(base, registered):
        glob = {"functools": functools}
        exec(textwrap.dedent(f"""
            @functools.singledispatch
            def h(v):
                return v * {base}

            @h.register
            def _(v: int):
                return v * {registered}

            def f(X):
                return h(X)
            """), glob)
        return keys.code_digests(glob["f"])
    assert digests(2.0, 5) != digests(3.0, 5)
    assert digests(2.0, 5) != digests(2.0, 6)
    assert digests(2.0, 5) == digests(2.0, 5)


def test_fast_key_sees_the_users_functions_a_librarys_closure_keeps_in_a_tuple(tmp_path):
    """A library's `compose(*fns)` (a closure over the tuple of the user's functions)
    was keyed by the functions' names: `v * 3.0` in place of `v * 2.0` in the helper it
    composes was, in the next process, a hit computing with 2.0. The user's functions in
    a tuple, list or set the wrapper holds are read as those it holds directly."""
    import importlib.util
    from jitdl.cache import keys
    lib = tmp_path / "site-packages"
    lib.mkdir()
    (lib / "fakelib_compose.py").write_text(textwrap.dedent("""\
        def compose(*fns):
            def run(x):
                for f in fns:
                    x = f(x)
                return x
            return run
        """))
    spec = importlib.util.spec_from_file_location("fakelib_compose", lib / "fakelib_compose.py")
    fakelib = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fakelib)
    assert keys._is_library(fakelib.compose)

    def digests(c):
        glob = {"fakelib": fakelib}
        exec(textwrap.dedent(f"""
            def h(v):
                return v * {c}
            H = fakelib.compose(h)

            def f(X):
                return H(X)
            """), glob)
        return keys.code_digests(glob["f"])
    assert digests(2.0) != digests(3.0)
    assert digests(2.0) == digests(2.0)


def test_fast_key_sees_a_functions_attributes():
    """A helper's attributes (`helper.scale = 2.0`, read in it as `helper.scale`) were
    not in the key: set to 3.0 for the next process, a disk-cache hit computed with 2.0."""
    import functools
    from jitdl.cache import keys

    def helper(x):
        return x * helper.scale

    def f(X):
        return helper(X)
    helper.scale = 2.0
    before = keys.code_digests(f)
    helper.scale = 3.0
    assert keys.code_digests(f) != before
    assert keys.code_digests(f) == keys.code_digests(f)

    @functools.wraps(helper)            # (a wrapper's __wrapped__ is read as a function)
    def wrapped(x):
        return helper(x)

    def g(X):
        return wrapped(X)
    before = keys.code_digests(g)
    helper.scale = 4.0
    assert keys.code_digests(g) != before


class _ForwardingCfg:
    """A config whose attributes are its dict's keys (__getattr__ raising KeyError)."""
    def __init__(self, d):
        self.__dict__["d"] = d

    def __getattr__(self, k):
        return self.d[k]


def test_fast_key_reads_objects_whose_getattr_raises(rng):
    """An object whose __getattr__ raises another error than AttributeError (a config
    forwarding to its dict: KeyError '__wrapped__'), as a global or in a list, made the
    key raise that bare error at the first call; it is read by its state now."""
    import numpy as np
    import jitdl as jd
    from jitdl.cache import keys
    glob = {"CFG": _ForwardingCfg({"scale": 2.0}), "CFGS": [_ForwardingCfg({"scale": 3.0})]}
    exec("def f(X):\n    return X * CFG.scale * CFGS[0].scale\n", glob)
    f = glob["f"]
    before = keys.code_digests(f)
    glob["CFGS"][0].d["scale"] = 5.0
    assert keys.code_digests(f) != before
    glob["CFG"].d["scale"] = 7.0
    assert keys.code_digests(f) == keys.code_digests(f)

    @jd.compute
    def scaled(X):
        Y[i] = X[i] * CFG2.scale
        return Y
    scaled.pyfunc.__globals__["CFG2"] = _ForwardingCfg({"scale": 4.0})
    x = rng.standard_normal(7)
    np.testing.assert_allclose(scaled(x), x * 4.0)


class _Node:
    def __init__(self, v, kids=()):
        self.v, self.kids = v, list(kids)


def test_fast_key_reads_cycles_and_trees_of_objects():
    """A list or dict holding itself was read again and again down to the depth the key
    reads, and a tree of objects 7 deep went past it (each object counted twice, itself
    and its attributes): either gave no fast key, so the definition was traced and
    lowered again in every process ('hit (same loop IR)'). A cycle enters the key as
    how far back it goes, and an object's attributes are at its own depth."""
    from jitdl.cache import keys

    def digests(value):
        def f(X):
            return X * V
        f.__globals__["V"] = value          # (this module's global V, read by f)
        return keys.code_digests(f, whole=True)   # (raises where the key cannot see it)

    def cyclic(v, back):
        inner = [v]
        outer = [inner]
        inner.append(outer if back == 2 else inner)
        return outer

    def tree(depth, leaf):
        return _Node(1.0, [tree(depth - 1, leaf)]) if depth else _Node(leaf)

    d = {"s": 2.0}
    d["self"] = d
    e = {"s": 3.0}
    e["self"] = e
    assert digests(d) != digests(e)
    assert digests(cyclic(2.0, 1)) != digests(cyclic(3.0, 1))
    assert digests(cyclic(2.0, 1)) != digests(cyclic(2.0, 2))
    assert digests(tree(8, 2.0)) != digests(tree(8, 3.0))
    assert digests(tree(8, 2.0)) == digests(tree(8, 2.0))
    with pytest.raises(ValueError, match="too deep"):
        digests(tree(25, 2.0))


def test_fast_key_reads_a_container_shared_along_many_paths_once(monkeypatch):
    """A value whose containers share one another (`A = {"a": B, "b": B, ...}`, B = {"a":
    C, ...}) was read and written out once per path to each: 4**levels, a minute at each
    process's first call for 10 levels, never done for 20. A container with no cycle in
    it is read once per depth now, and an edit deep in it still changes the key."""
    from jitdl.cache import keys
    leaf = {"v": 2.0}
    a = leaf
    for _ in range(8):
        a = {k: a for k in "abcd"}
    glob = {"A": a}
    exec("def f(x):\n    return x * A['a']['b']['c']['d']['a']['b']['c']['d']['v']\n", glob)
    calls = []
    real = keys._key_text
    monkeypatch.setattr(keys, "_key_text", lambda k: calls.append(k) or real(k))
    before = keys.code_digests(glob["f"])
    assert len(calls) < 100, len(calls)
    leaf["v"] = 3.0
    assert keys.code_digests(glob["f"]) != before


def test_fast_key_of_a_helper_that_logs_does_not_follow_other_loggers():
    """A helper logging through a module's logger read the logger's attributes into the
    key: its manager with every logger of the process, and the levels asked about so
    far. Importing another module that makes a logger (asyncio), or a log call before
    the key, gave the next process another key ('hit (same loop IR)'). A logger enters
    by its name."""
    import logging
    from jitdl.cache import keys
    log = logging.getLogger("jitdl_test_helper")
    adapter = logging.LoggerAdapter(log, {"k": 1})

    def h(x):
        log.debug("h")
        adapter.debug("h")
        return x * 2.0

    def f(X):
        return h(X) * CFG["scale"]
    f.__globals__["CFG"] = {"log": log, "scale": 2.0}
    before = keys.code_digests(f, whole=True)
    logging.getLogger(f"jitdl_test_other_{id(before)}")
    log.isEnabledFor(logging.INFO)            # (fills the logger's cache of levels)
    assert keys.code_digests(f, whole=True) == before
    f.__globals__["CFG"] = {"log": log, "scale": 3.0}
    assert keys.code_digests(f, whole=True) != before


def test_the_numpy_version_is_in_the_keys(monkeypatch):
    """Tracing follows NumPy's result types and casting rules, which NumPy 2 changed for
    scalars (np.float32 array times np.float64(2.0): float32 in 1.x, float64 in 2.x), but
    NumPy's version was in no key: a kernel cached before an upgrade was a hit after it,
    with the old result type."""
    import numpy as np
    import jitdl as jd
    from jitdl.cache import keys

    @jd.compute
    def twice(X):
        return jd.tensor(X.shape, lambda i: X[i] * 2.0, name="Y")
    specs = twice._specs((np.ones(3),))
    target = twice._target(specs)
    monkeypatch.setattr(keys, "_ENV", {})
    before = keys.fast_key(twice, specs, None, target)[0], \
        keys.full_key("ir", False, {}, target)[0]
    monkeypatch.setattr(keys, "_ENV", {})
    monkeypatch.setattr(np, "__version__", np.__version__ + ".post1")
    after = keys.fast_key(twice, specs, None, target)[0], \
        keys.full_key("ir", False, {}, target)[0]
    assert before[0] != after[0] and before[1] != after[1]


def test_fast_key_of_a_big_table_of_numbers_follows_its_edits():
    """A global list of plain numbers (a lookup table) is read element by element with
    no attribute lookups (3.7 s for a million since fd19970's, 0.8 s now); an edit of one
    element, or of its type, still changes the key."""
    from jitdl.cache import keys
    glob = {"TABLE": [float(i) for i in range(100000)]}
    exec("def f(X):\n    return X * TABLE[3]\n", glob)
    before = keys.code_digests(glob["f"])
    glob["TABLE"][99999] = 1.5
    after = keys.code_digests(glob["f"])
    assert after != before
    glob["TABLE"][99999] = 1
    assert keys.code_digests(glob["f"]) != after


class _Layer:
    def __init__(self, w):
        self.w = w


def test_fast_key_reads_the_class_of_many_objects_once():
    """Each object of the user's class in a container read its class again (96c3df9: a
    part per object, and where the class is asked of the file system per object): a
    list of 20000 layers took 1.0 s of CPU at each first call (0.65 s before 96c3df9),
    0.2 s now. The class is read once, and an edit of one object or of the class still
    changes the key."""
    from jitdl.cache import keys
    glob = {"LAYERS": [_Layer(float(i)) for i in range(2000)]}
    exec("def f(X):\n    return X * LAYERS[3].w\n", glob)
    w = keys._walk(glob["f"])
    assert sum("<class of a value>" in p for p in w.parts) == 1, w.parts
    before = keys.code_digests(glob["f"])
    glob["LAYERS"][1999].w = -1.0
    after = keys.code_digests(glob["f"])
    assert after != before
    _Layer.bias = 1.0
    try:
        assert keys.code_digests(glob["f"]) != after
    finally:
        del _Layer.bias


def test_fast_key_of_an_object_array_is_its_values():
    """A global NumPy array of Python objects was keyed by its bytes, the objects'
    addresses: another key in every process (a miss each time) and none of its values.
    Equal contents give one key now, and an edit changes it."""
    import numpy as np
    from jitdl.cache import keys

    def digests(arr):
        glob = {"ARR": arr, "ROWS": [arr]}
        exec("def f(X):\n    return X * ARR[0] * ROWS[0][0]\n", glob)
        return keys.code_digests(glob["f"])
    make = lambda v: np.array([float(v), "a", (1, 2)], dtype=object)   # (new objects)
    assert digests(make("1.5")) == digests(make("1.5"))
    assert digests(make("1.5")) != digests(make("2.5"))


def test_fast_key_of_a_set_of_functions_is_the_same_in_every_process(tmp_path):
    """A set holding functions or classes with strings (`{("relu", relu), ...}`) was read
    in the set's order, which follows the strings' hashes: the walker's parts came in
    another order in each process, another key each time (a miss in every process); a
    dict keyed by functions or objects had their str, with an address, in its text."""
    (tmp_path / "ksetmod.py").write_text(textwrap.dedent('''\
        SCALE = 2.0
        def relu(x): return x * SCALE
        def gelu(x): return x + 1
        class K1: v = 1
        class K2: v = 2
        ACTS = frozenset([("relu", relu), ("gelu", gelu), ("k1", K1), ("k2", K2)])
        class Tag: pass
        GAIN = {relu: 1.0, gelu: 2.0, Tag(): 3.0, (1, relu): 4.0, 5: 5.0, "5": 6.0}
        def f(X):
            return X * len(ACTS) * GAIN[relu]
        '''))
    code = "import ksetmod\nfrom jitdl.cache import keys\nprint(keys.code_digests(ksetmod.f)[1])"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    seen = set()
    for seed in range(6):
        p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=TIMEOUT,
                           env={**env, "PYTHONHASHSEED": str(seed)})
        assert p.returncode == 0, p.stderr
        seen.add(p.stdout.strip())
    assert len(seen) == 1, seen


def test_fast_key_of_a_set_constant_in_code_is_the_same_in_every_process(tmp_path):
    """A function's constants entered its digest by their repr, and `mode in {"relu",
    "gelu", "tanh"}` compiles to a frozenset constant whose repr follows the strings'
    hashes: another key in each process (traced and lowered again each time) for any
    definition or helper written so; likewise a set default value."""
    (tmp_path / "ksetconst.py").write_text(textwrap.dedent('''\
        MODE = "relu"
        def act(x, kinds=frozenset({"p", "q", "r"}), *, more=("s", frozenset({"t", "u"}))):
            if MODE in {"relu", "gelu", "tanh", "silu"}:
                return x * 2
            return x
        def f(X):
            return act(X)
        '''))
    code = "import ksetconst\nfrom jitdl.cache import keys\n" \
           "print(keys.code_digests(ksetconst.f))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    seen = set()
    for seed in range(6):
        p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=TIMEOUT,
                           env={**env, "PYTHONHASHSEED": str(seed)})
        assert p.returncode == 0, p.stderr
        seen.add(p.stdout.strip())
    assert len(seen) == 1, seen


def test_only_names_the_rewritten_definition_never_reads_leave_the_key():
    """notation_names (the globals of the compiled code that index notation makes its
    own): not an index read elsewhere as a value, an attribute (`cfg.i` reads cfg's
    attribute i), or anything where a nested function could read it."""
    import ast
    from jitdl.capture.transform import notation_names

    def names(src):
        return set(notation_names(ast.parse(textwrap.dedent(src)).body[0]))
    assert names("""
        def f(X):
            n, m = X.shape
            Y[i, j] = X[i, j] + sum(X[i, k] for k in range(m))
            Z[j] = Y[0, j] * Y[1, j]
            return Z
        """) == {"Y", "Z", "i", "j"}
    assert names("""
        def f(X):
            Y[i] = X[i] * 2
            Z[j] = Y[j] + i + cfg.j
            return Z
        """) == {"Y", "Z"}
    assert names("""
        def f(X):
            Y[i] = X[i] * 2
            def g():
                return i
            return Y
        """) == set()


def test_fast_key_sees_a_number_default_beside_a_function_default():
    """A helper's defaults entered the key as one repr, which names the type only where
    any part shows an address: `def helper(x, scale=2.0, act=lambda v: v)` had
    '<builtins.tuple>' for both, and its scale (not read as a function) nowhere: edited to
    3.0 for the next process, a disk-cache hit computed with 2.0."""
    from jitdl.cache import keys

    def digests(scale):
        glob = {}
        exec(f"def helper(x, scale={scale}, act=lambda v: v):\n    return act(x) * scale\n"
             "def f(X):\n    return helper(X)\n", glob)
        return keys.code_digests(glob["f"])
    assert digests(2.0) != digests(3.0)
    assert digests(2.0) == digests(2.0)


def test_fast_key_sees_default_values_that_are_functions_or_keyword_only(rng):
    """A helper's keyword-only default (`def h(v, *, c=c)`) and a default that is a
    function (`g=lambda v: v * c`, a schedule's `fn=fn`) were not in the key: a second
    definition made by the same factory with another value hit the first one's kernel
    on disk and computed with its value (x * 2.0 where x * 3.0 was written)."""
    import numpy as np
    import jitdl as jd
    from jitdl.cache import keys

    def make(c):
        def kw(v, *, c=c):
            return v * c

        def fn(v, g=lambda v: v * c):
            return g(v)

        def f(X):
            return jd.tensor(X.shape, lambda i: kw(X[i]) + fn(X[i]))
        return f
    assert keys.code_digests(make(2.0)) != keys.code_digests(make(3.0))
    x = rng.standard_normal(7)
    for c in (2.0, 3.0):                       # (the second was a disk hit of the first)
        np.testing.assert_allclose(jd.compute(make(c))(x), x * 2 * c, rtol=1e-12)

    def sched(step):
        def s(s, cfg, step=step):
            step(s, s["Y"])
        return s
    assert keys.code_digests(sched(lambda s, Y: s.parallel(Y.axis[0]))) != \
        keys.code_digests(sched(lambda s, Y: s.vectorize(Y.axis[0])))


FACTOR = 1.0


class _Tile:
    def __init__(self, f):
        self.f = f


class _Config:
    def __init__(self, f):
        self.tile = _Tile(f)


class _Slots:
    __slots__ = ("scale",)

    def __init__(self, scale):
        self.scale = scale


class _ScheduleMaker:
    def __init__(self, factor):
        self.factor = factor

    def sched(self, s, cfg):
        s.split(s["Y"].axis[0], self.factor)

    def __call__(self, s, cfg):
        s.split(s["Y"].axis[1], self.factor)


def test_fast_key_sees_nested_objects_slots_and_schedule_callables():
    """Found by a schedule fuzzer: a value reached through an attribute of an object of
    the user's class (`cfg.tile.f`), inside a container (`[Tile(2.0)]`) or in __slots__
    was not in the key, so a later process with another value loaded the first kernel
    (a wrong answer; a refused schedule ran as the cached legal one); a schedule given
    as a bound method kept no `self`, and a functools.partial or an object with
    __call__ as a schedule raised AttributeError: '__code__' on every cached call."""
    import functools
    from jitdl.cache import keys

    def digests(value):
        def f(X):
            return value
        return keys.code_digests(f)

    assert digests(_Config(2)) != digests(_Config(3))
    assert digests([_Tile(2.0)]) != digests([_Tile(3.0)])
    assert digests({"t": _Tile(2.0)}) != digests({"t": _Tile(3.0)})
    assert digests(_Slots(2.0)) != digests(_Slots(3.0))
    loop = _Tile(1.0)
    loop.f = [loop]                       # a cycle is read once, not followed forever
    assert digests(loop) == digests(loop)
    # schedule functions: bound methods, partials and callable objects
    assert keys.code_digests(_ScheduleMaker(2).sched) != \
        keys.code_digests(_ScheduleMaker(3).sched)

    def generic(s, cfg, factor):
        s.split(s["Y"].axis[0], factor)
    assert keys.code_digests(functools.partial(generic, factor=2)) != \
        keys.code_digests(functools.partial(generic, factor=3))
    assert keys.code_digests(_ScheduleMaker(2)) != keys.code_digests(_ScheduleMaker(3))

    import numpy as np
    import jitdl as jd
    x = np.arange(12.0).reshape(4, 3)
    for sched in (functools.partial(generic, factor=3), _ScheduleMaker(2),
                  _ScheduleMaker(2).sched):
        @jd.compute
        def twice(X):
            return jd.tensor(X.shape, lambda i, j: X[i, j] * 2.0, name="Y")
        jd.schedule(twice, target="cpu")(sched)
        np.testing.assert_array_equal(twice(x), 2 * x)


def test_changing_a_nested_object_attribute_invalidates(tmp_path):
    src = textwrap.dedent('''\
        import jitdl as jd

        class Tile:
            def __init__(self, scale):
                self.scale = scale

        class Params:
            __slots__ = ("tile",)

            def __init__(self, scale):
                self.tile = Tile(scale)

        PARAMS = Params(2.0)

        @jd.compute
        def scaled(X):
            Y[i] = X[i] * PARAMS.tile.scale
            return Y
        ''')
    write_module(tmp_path, "kmod", src)
    run_child(tmp_path, [call("scaled", [("X", (9,))], "X * 2.0")])
    edit_module(tmp_path, "kmod", "Params(2.0)", "Params(3.0)")
    ch = run_child(tmp_path, [call("scaled", [("X", (9,))], "X * 3.0")])
    assert ch["scaled"]["ok"] and ch["scaled"]["result"] == "compiled"


# ----------------------------------------------------------------------------- source lines

LMOD = '''\
import jitdl as jd
import lhelp


@jd.compute(dynamic=True)
def rowmax(X):
    n, m = X.shape
    Y[i] = max(X[i, k] for k in range(m))
    return Y


@jd.compute(dynamic=True)
def rowmax_by_helper(X):
    n, m = X.shape
    return lhelp.row_max(X, n, m)


@jd.compute
def shift(X, s):
    Y[i] = X[i] + s
    return Y
'''

LHELP = '''\
import jitdl as jd


def row_max(X, n, m):
    k = jd.reduce_axis(m, name="k")
    return jd.tensor((n,), lambda i: jd.max(X[i, k], axis=k), name="Y")
'''

# calls each function right, then wrongly (an empty row: a call-time condition on the
# sizes; a Python int beyond int32: the int checks), and prints where each error points
LINES_CHILD = '''\
import importlib, json, re, sys
import numpy as np
import jitdl as jd

out = []
rng = np.random.default_rng(0)
for module, name in json.loads(sys.argv[1]):
    f = getattr(importlib.import_module(module), name)
    if name == "shift":
        x = rng.integers(-9, 9, 7).astype(np.int32)
        good, ok, bad = (x, 3), lambda y: np.array_equal(y, x + 3), (x, 2 ** 40)
    else:
        x = rng.standard_normal((4, 6))
        good, ok, bad = (x,), lambda y: np.array_equal(y, x.max(1)), (np.ones((3, 0)),)
    right = bool(ok(f(*good)))
    try:
        f(*bad)
        where = None
    except jd.JitdlError as e:
        m = re.search(r'the definition: File "(.*)", line (\\d+)', e.message)
        where = [m[1], int(m[2])] if m else [e.loc.filename, e.loc.lineno]
    out.append({"func": name, "ok": right, "where": where,
                "result": f.cache_info()["events"][0]["result"]})
print("RESULT " + json.dumps(out))
'''


def run_lines_child(root, calls, script="lines_child.py"):
    if not (root / script).exists():
        (root / script).write_text(LINES_CHILD)
    p = subprocess.run([PY, str(root / script), json.dumps(calls)], cwd=str(root),
                       env=base_env(root), capture_output=True, text=True, timeout=TIMEOUT)
    return _parse(p)


def line_of(path, text, after=0):
    """(path, the number of the first line of the file after line `after` holding text)."""
    lines = path.read_text().splitlines()
    return [str(path), next(n for n, ln in enumerate(lines, 1) if n > after and text in ln)]


def test_errors_name_the_line_where_the_definition_is_now_from_the_cache(tmp_path):
    """A kernel stores lines of the user's source (the call-time conditions on the sizes,
    the int checks' definition line), and the fast key leaves out where the function is:
    a definition moved down its file (or a helper in its file) was a hit whose errors
    named the old lines (blank, or another statement). The alias keeps the lines relative
    to the function that holds them and a hit places them where it is now; lines inserted
    inside a definition change its key; an identical definition in another module (same
    loop IR) names its own file."""
    write_module(tmp_path, "lmod", LMOD)
    write_module(tmp_path, "lhelp", LHELP)
    funcs = [["lmod", "rowmax"], ["lmod", "rowmax_by_helper"], ["lmod", "shift"]]
    mods = tmp_path / "mods"

    def expected():
        return {"rowmax": line_of(mods / "lmod.py", "max(X[i, k]"),
                "rowmax_by_helper": line_of(mods / "lhelp.py", "jd.max("),
                "shift": line_of(mods / "lmod.py", "X[i] + s")}

    def check(child, result):
        want = expected()
        for r in child.results:
            assert r["ok"], r
            assert (r["func"], r["where"]) == (r["func"], want[r["func"]])
            assert r["result"] == result, r
    check(run_lines_child(tmp_path, funcs), "compiled")
    check(run_lines_child(tmp_path, funcs), "hit")
    for name in ("lmod", "lhelp"):
        edit_module(tmp_path, name, "import jitdl as jd\n", "import jitdl as jd\n\n\n# moved\n")
    check(run_lines_child(tmp_path, funcs), "hit")
    # a line inside: another key (the same loop IR: no code generation)
    edit_module(tmp_path, "lmod", "    n, m = X.shape\n", "    n, m = X.shape\n\n")
    edit_module(tmp_path, "lmod", "    Y[i] = X[i] + s\n", "    # more\n    Y[i] = X[i] + s\n")
    check(run_lines_child(tmp_path, funcs), "hit (same loop IR)")
    check(run_lines_child(tmp_path, funcs), "hit")
    # the same definitions in another module, lower in its file
    write_module(tmp_path, "lmod2", "\n" * 7 + LMOD)
    ch = run_lines_child(tmp_path, [["lmod2", "rowmax"], ["lmod2", "shift"]])
    assert [r["result"] for r in ch.results] == ["hit (same loop IR)"] * 2
    for r in ch.results:
        assert r["ok"] and r["where"] == line_of(
            mods / "lmod2.py", "max(X[i, k]" if r["func"] == "rowmax" else "X[i] + s"), r


MAIN_ROWMAX = '''\
import json, sys
import numpy as np
import jitdl as jd
%s

@jd.compute(dynamic=True)
def rowmax(X):
    n, m = X.shape
    Y[i] = max(X[i, k] for k in range(m))
    return Y


x = np.random.default_rng(0).standard_normal((4, 6))
ok = bool(np.array_equal(rowmax(x), x.max(1)))
try:
    rowmax(np.ones((3, 0)))
except jd.JitdlError as e:
    where = [e.loc.filename, e.loc.lineno]
rowmax.export(sys.argv[1], x)
print("RESULT " + json.dumps([{"func": "rowmax", "ok": ok, "where": where,
                               "result": rowmax.cache_info()["events"][0]["result"]}]))
'''


def test_a_main_definition_in_another_file_hits_and_names_its_own_line(tmp_path):
    """A script's (or a notebook cell's) definition run again from another file, at
    another line, is still a hit, and its errors, and those of its export loaded in
    another process, name the line in the file that ran."""
    def run(name, padding):
        path = tmp_path / name
        path.write_text(MAIN_ROWMAX % padding)
        p = subprocess.run([PY, str(path), str(tmp_path / (name + ".jdx"))], cwd=str(tmp_path),
                           env=base_env(tmp_path), capture_output=True, text=True,
                           timeout=TIMEOUT)
        return _parse(p)["rowmax"], line_of(path, "max(X[i, k]")
    first, line = run("a.py", "")
    assert first["ok"] and first["where"] == line and first["result"] == "compiled", first
    again, line = run("b.py", "\n# another file, lower down\n" * 3)
    assert again["ok"] and again["where"] == line and again["result"] == "hit", again
    code = ("import sys, numpy as np, jitdl as jd\n"
            "try:\n    jd.load(sys.argv[1])(np.ones((2, 0)))\n"
            "except jd.JitdlError as e:\n    print('AT', e.loc.filename, e.loc.lineno)\n")
    p = subprocess.run([PY, "-c", code, str(tmp_path / "b.py.jdx")], env=base_env(tmp_path),
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.stdout.split() == ["AT", *map(str, line)], p.stdout + p.stderr
