"""Hostile scenarios for the on-disk kernel cache: killed processes, damaged or swapped
files, read-only / noexec / full file systems, fork, threads, races with eviction and
`cache clear`, broken linkers and damaged export files.

Same style as tests/test_cache.py (whose helpers this file reuses): jitdl runs in fresh
subprocesses with a private JITDL_CACHE_DIR, results are checked against float64 NumPy
references on fresh random inputs. Each scenario here once misbehaved (a crash, a hang,
a wrong kernel, junk left behind) or had no test.

Scenarios that could hang (fork, a FIFO in the cache) are started in the background by a
module fixture at the start of the file, so that their time limits run while the other
tests do.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import textwrap
import time

import pytest

from test_cache import (CHILD, KHELPER, KMOD, MATMUL, PY, SCALED, SOFTMAX,
                        STANDARD, TIMEOUT, _filler, _parse, alias_files,
                        assert_all_ok, base_env, call, kernel_files, kernel_of, leftovers,
                        needs_ld, run_child, run_cli, write_module)

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
HANG_LIMIT_S = 25          # a healthy probe finishes in ~2 s
CAP = 1 << 20              # the smallest JITDL_CACHE_MAX_BYTES jitdl accepts


def fresh(c):
    """The call `c` on fresh random inputs."""
    return dict(c, seed=random.randrange(1 << 31))


def std():
    return [fresh(c) for c in STANDARD]


def junk(root):
    """Files in the cache that are not entries, aliases or statistics."""
    cache = root / "cache"
    out = leftovers(root)
    if cache.exists():
        out += [p.name for p in cache.iterdir()
                if p.is_file() and not p.name.startswith("stats.sqlite")]
    return out


def cache_bytes(root):
    """Bytes of every file under cache/ except the statistics database."""
    return sum(p.stat().st_size for p in (root / "cache").rglob("*")
               if p.is_file() and not p.name.startswith("stats.sqlite"))


def kernel_bytes(root):
    """What JITDL_CACHE_MAX_BYTES bounds: the entries' bytes."""
    return sum(p.stat().st_size for p in kernel_files(root))


def entry(path):
    from jitdl.cache.store import unpack
    return unpack(path.read_bytes())


def repack(path, meta=None, shared=b"keep"):
    """Rewrite a cache entry (with a valid checksum) with other metadata or library."""
    from jitdl.cache.store import pack
    e = entry(path)
    path.write_bytes(pack(meta if meta is not None else e.meta, e.obj, dict(e.texts),
                          e.shared if shared == b"keep" else shared))
    os.chmod(path, 0o600)


def run_script(root, code, *args, cwd=None, timeout=TIMEOUT, **env):
    script = root / f"script_{random.randrange(1 << 30)}.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run([PY, str(script), *args], cwd=str(cwd or root),
                          env=base_env(root, **env), capture_output=True, text=True,
                          timeout=timeout)


def result_of(p):
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, \
        f"rc {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return json.loads(lines[-1][len("RESULT "):])


# ----------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile-template")
    write_module(root, "kmod", KMOD)
    write_module(root, "khelper", KHELPER)
    cold = run_child(root, std())
    assert_all_ok(cold)
    return root


def copy_warm(template, dst):
    for name in ("mods", "cache"):
        shutil.copytree(template / name, dst / name, symlinks=True)
    (dst / "child.py").write_text(CHILD)
    return dst


@pytest.fixture
def warm(template, tmp_path):
    return copy_warm(template, tmp_path)


# ----------------------------------------------------------------------------- hang probes

FORK_AFTER_IMPORT = '''\
import faulthandler, json, os, sys
import numpy as np
import kmod                                  # imports jitdl: its warm-up thread starts
pid = os.fork()                              # what multiprocessing's fork start does
if pid == 0:
    faulthandler.dump_traceback_later(int(sys.argv[1]), exit=True)
    X = np.random.default_rng().standard_normal((8, 16)).astype(np.float32)
    y = kmod.scaled(X)
    ok = bool(np.allclose(y, (X.astype(np.float64) + 1.0) * 2.0, rtol=1e-5, atol=1e-5))
    print("CHILD " + json.dumps({"ok": ok}), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("STATUS", os.waitstatus_to_exitcode(status), flush=True)
'''

FORK_AFTER_PARALLEL = '''\
import faulthandler, json, os, sys
import numpy as np
import kmod
rng = np.random.default_rng()
A = rng.standard_normal((256, 256)).astype(np.float32)
assert "parallel" in kmod.matmul.lower(A, A)      # a parallel loop (libgomp)
kmod.matmul(A, A)
pid = os.fork()
if pid == 0:
    faulthandler.dump_traceback_later(int(sys.argv[1]), exit=True)
    B = rng.standard_normal((256, 256)).astype(np.float32)
    y = kmod.matmul(A, B)                          # the kernel loaded before the fork
    ok = bool(np.allclose(y, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-3))
    print("CHILD " + json.dumps({"ok": ok}), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("STATUS", os.waitstatus_to_exitcode(status), flush=True)
'''


@pytest.fixture(scope="module", autouse=True)
def probes(template, tmp_path_factory):
    """Start the scenarios that may hang, now; the tests at the end collect them."""
    started = {}

    def start(name, root, args, **env):
        p = subprocess.Popen([PY, *args], cwd=str(root), env=base_env(root, **env),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started[name] = (p, time.time())

    # fork right after `import jitdl`
    r = tmp_path_factory.mktemp("fork-import")
    write_module(r, "kmod", KMOD)
    write_module(r, "khelper", KHELPER)
    (r / "probe.py").write_text(FORK_AFTER_IMPORT)
    start("fork_import", r, [str(r / "probe.py"), str(HANG_LIMIT_S - 5)])

    # fork after a parallel kernel ran in the parent
    r = tmp_path_factory.mktemp("fork-parallel")
    write_module(r, "kmod", KMOD)
    write_module(r, "khelper", KHELPER)
    (r / "probe.py").write_text(FORK_AFTER_PARALLEL)
    start("fork_parallel", r, [str(r / "probe.py"), str(HANG_LIMIT_S - 5)],
          JITDL_NUM_THREADS=2)

    # a FIFO where a kernel entry should be
    r = copy_warm(template, tmp_path_factory.mktemp("fifo"))
    victim = kernel_of(r, "softmax")
    victim.unlink()
    os.mkfifo(victim, 0o600)
    start("fifo", r, [str(r / "child.py"), json.dumps({"calls": std()})])

    yield started
    for p, _ in started.values():
        if p.poll() is None:
            p.kill()
            p.communicate()


def collect(probes, name):
    """(rc or None if it hung, stdout, stderr) of a probe."""
    p, t0 = probes[name]
    try:
        out, err = p.communicate(timeout=max(1.0, HANG_LIMIT_S - (time.time() - t0)))
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return None, out, err


# ============================================================================ wrong binary

def test_swapped_entry_files_are_not_run_as_the_other_kernel(warm):
    a, b = kernel_of(warm, "scaled"), kernel_of(warm, "softmax")
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)
    ch = run_child(warm, [fresh(SCALED), fresh(SOFTMAX)])
    for r in ch.results:
        assert r["ok"], f"{r['func']}: ran another kernel ({r['result']}, max rel err " \
                        f"{r['err']:.3g})"
        assert r["result"] == "compiled", r
    assert ch.stderr.count("does not fit the call") == 2, ch.stderr


@pytest.mark.parametrize("how", ["alias to another shape", "signature of other shapes"])
def test_an_entry_for_other_shapes_is_never_run(tmp_path, how):
    write_module(tmp_path, "kmod", KMOD)
    write_module(tmp_path, "khelper", KHELPER)
    big = call("scaled", [("X", (1024, 1024))], "(X + 1.0) * 2.0")
    small = call("scaled", [("X", (3, 4))], "(X + 1.0) * 2.0")
    run_child(tmp_path, [fresh(big), fresh(small)])
    by_call = {entry(p).meta["call"]: p for p in kernel_files(tmp_path)}
    big_key = by_call["X: float32[1024, 1024]"].stem
    small_entry = by_call["X: float32[3, 4]"]
    if how == "alias to another shape":
        for a in alias_files(tmp_path):          # every alias of scaled -> the big kernel
            rec = json.loads(a.read_text())
            rec["full"] = big_key
            a.write_text(json.dumps(rec))
    else:                                        # right checksum, metadata of other shapes
        meta = entry(small_entry).meta
        meta["signature"]["inputs"][0][1] = [1, 2]
        meta["signature"]["outputs"][0][1] = [1, 2]
        repack(small_entry, meta)
    p = subprocess.run([PY, str(tmp_path / "child.py"), json.dumps({"calls": [fresh(small)]})],
                       env=base_env(tmp_path), capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, f"the child died (rc {p.returncode}):\n{p.stderr[-2000:]}"
    ch = _parse(p)
    assert ch["scaled"]["ok"] and ch["scaled"]["shape"] == [3, 4], ch.results
    assert ch["scaled"]["result"] in ("compiled", "hit (same loop IR)"), ch.results
    assert "does not fit the call kmod.scaled(X: float32[3, 4])" in ch.stderr, ch.stderr


def test_the_thread_count_is_part_of_the_key(tmp_path):
    write_module(tmp_path, "kmod", KMOD)
    write_module(tmp_path, "khelper", KHELPER)
    code = '''\
        import json, sys
        import numpy as np
        import kmod
        rng = np.random.default_rng()
        A, B = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
        y = kmod.matmul(A, B)
        print("RESULT " + json.dumps({
            "ok": bool(np.allclose(y, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-3)),
            "result": kmod.matmul.cache_info()["events"][-1]["result"],
            "parallel": "parallel" in kmod.matmul.lower(A, B)}))
        '''
    one = result_of(run_script(tmp_path, code, JITDL_NUM_THREADS=1))
    assert one["ok"] and one["result"] == "compiled" and not one["parallel"], one
    two = result_of(run_script(tmp_path, code, JITDL_NUM_THREADS=2))
    assert two["ok"], two
    assert two["parallel"], f"a 2-thread process runs the 1-thread process's serial " \
                            f"kernel ({two['result']})"


def test_a_symlinked_entry_is_not_followed(warm):
    """kernels/<softmax>.jdk -> <scaled>.jdk: following it would run the wrong kernel."""
    victim, other = kernel_of(warm, "softmax"), kernel_of(warm, "scaled")
    victim.unlink()
    victim.symlink_to(other)
    ch = run_child(warm, std())
    assert_all_ok(ch)
    assert ch["softmax"]["result"] == "compiled"
    assert ch["scaled"]["result"] == ch["matmul"]["result"] == "hit"
    assert not victim.is_symlink() and entry(victim).meta["fname"] == "kmod.softmax"
    assert run_child(warm, [fresh(SOFTMAX)])["softmax"]["result"] == "hit"


# ============================================================================ size cap, junk

@needs_ld
def test_adding_libraries_keeps_the_size_cap(warm):
    for p in kernel_files(warm):                 # entries as JITDL_LINKER=0 wrote them
        repack(p, shared=None)
    kdir = warm / "cache" / "kernels"
    room, i = CAP - 500 - kernel_bytes(warm), 0
    from jitdl.cache.store import pack
    while room > 0:
        data = _filler(min(16384, room) if room >= 2 * 16384 else room, pack)
        f = kdir / (hashlib.sha256(f"filler{i}".encode()).hexdigest() + ".jdk")
        f.write_bytes(data)
        # least recently used, so evicted before the kernels (else the library linked
        # after the first hit could evict the third kernel before it is looked up)
        old = time.time() - 3600 - i
        os.utime(f, (old, old))
        room, i = room - len(data), i + 1
    assert CAP - 1500 < kernel_bytes(warm) <= CAP
    ch = run_child(warm, std(), JITDL_CACHE_MAX_BYTES=CAP)
    assert_all_ok(ch)
    assert [r["result"] for r in ch.results] == ["hit"] * 3
    assert kernel_bytes(warm) <= CAP, f"{kernel_bytes(warm)} bytes > cap {CAP}"


def test_junk_of_killed_processes_is_reclaimed(warm):
    dead = subprocess.Popen(["true"])
    dead.wait()
    old = time.time() - 7200
    stale = [warm / "cache" / "kernels" / f".tmp-kill{i}" for i in range(2)]
    stale.append(warm / "cache" / f".load-{dead.pid}-0123456789abcdef.so")
    for p in stale:
        p.write_bytes(os.urandom(600_000))       # a write or a load cut short by SIGKILL
        os.utime(p, (old, old))
    ch = run_child(warm, [fresh(call("scaled", [("X", (5, 7))], "(X + 1.0) * 2.0"))],
                   JITDL_CACHE_MAX_BYTES=CAP)    # a put, so an eviction pass
    assert_all_ok(ch)
    v = run_cli(warm, "verify", "--remove", JITDL_CACHE_MAX_BYTES=CAP)
    assert v.returncode == 0, v.stdout + v.stderr
    assert [p.name for p in stale if p.exists()] == [], "stale temporaries are still there"
    assert cache_bytes(warm) <= CAP


KILLER_LD = '#!/bin/sh\nkill -9 "$PPID"\nexit 1\n'


@pytest.fixture
def killed_mid_link(tmp_path):
    """A cold process SIGKILLed by its own linker (the linker thread runs `ld`)."""
    write_module(tmp_path, "kmod", KMOD)
    write_module(tmp_path, "khelper", KHELPER)
    (tmp_path / "child.py").write_text(CHILD)
    ld = tmp_path / "killer-ld"
    ld.write_text(KILLER_LD)
    ld.chmod(0o755)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    p = subprocess.run([PY, str(tmp_path / "child.py"), json.dumps({"calls": std()})],
                       env=base_env(tmp_path, JITDL_LINKER=str(ld), TMPDIR=str(tmpdir)),
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == -9, (p.returncode, p.stderr)
    return tmp_path, tmpdir


@needs_ld
def test_a_process_killed_mid_link_leaves_a_usable_cache(killed_mid_link):
    root, tmpdir = killed_mid_link
    assert kernel_files(root), "nothing was stored before the kill"
    v = run_cli(root, "verify")
    assert v.returncode == 0 and " 0 damaged" in v.stdout, v.stdout
    after = run_child(root, std(), TMPDIR=str(tmpdir))
    assert_all_ok(after)
    assert {r["result"] for r in after.results} <= {"hit", "compiled", "hit (same loop IR)"}
    final = run_child(root, std(), TMPDIR=str(tmpdir))
    assert_all_ok(final)
    assert [(r["result"], r["loader"]) for r in final.results] == \
        [("hit", "shared library")] * 3
    assert leftovers(root) == []


@needs_ld
def test_a_process_killed_mid_link_leaves_no_link_directory(killed_mid_link):
    root, tmpdir = killed_mid_link
    run_child(root, std(), TMPDIR=str(tmpdir))           # a later, healthy process
    assert sorted(p.name for p in tmpdir.iterdir()) == []


# ============================================================================ races

CHURN = '''\
import os, sys, time
from jitdl.cache.store import pack
d, stop = sys.argv[1], sys.argv[2]
data = pack({"fname": "churn", "call": "", "signature": {}}, b"\\x90" * 64, {})
names = [os.path.join(d, "%064x.jdk" % (i + 1)) for i in range(300)]
for n in names:                      # (whole files only, as put writes them: a listing
    with open(n + ".tmp", "wb") as f:  # may start before the last one is there)
        f.write(data)
    os.replace(n + ".tmp", n)
i = 0
while not os.path.exists(stop):      # another process evicting and re-writing entries
    gone, back = names[i % 300], names[(i + 150) % 300]
    try:
        os.unlink(gone)
    except FileNotFoundError:
        pass
    tmp = back + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, back)
    i += 1
'''


@pytest.fixture
def churn(tmp_path):
    """A Store over a kernels/ directory in which another process keeps removing and
    re-adding valid entries (as eviction and put do)."""
    from jitdl.cache.store import Store
    st = Store(str(tmp_path / "cache"), CAP)
    assert st.usable
    (tmp_path / "churn.py").write_text(CHURN)
    stop = tmp_path / "stop"
    p = subprocess.Popen([PY, str(tmp_path / "churn.py"), st.kernels, str(stop)],
                         env=base_env(tmp_path))
    t0 = time.time()
    while len(os.listdir(st.kernels)) < 150 and time.time() - t0 < 20:
        time.sleep(0.01)
    yield st
    stop.touch()
    p.wait(timeout=20)


def test_listing_while_another_process_evicts(churn):
    for _ in range(40):
        churn.entries()
        churn.size()
        good, bad = churn.verify()
        assert bad == [], f"valid entries reported damaged: {bad[:3]}"


def test_put_while_another_process_evicts_does_not_warn(churn):
    import warnings
    from jitdl.cache.store import CacheWarning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(40):
            key = hashlib.sha256(f"mine{i}".encode()).hexdigest()
            churn.put(key, {"fname": "mine", "call": "", "signature": {}}, b"\xc3" * 64, {})
            assert churn.get(key) is not None
    msgs = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert msgs == [], msgs[:2]


def _race(root, n, calls_of, **env):
    script = root / "child.py"
    script.write_text(CHILD)
    barrier = root / "go"
    procs = [subprocess.Popen(
        [PY, str(script), json.dumps({"calls": calls_of(i), "barrier": str(barrier)})],
        cwd=str(root), env=base_env(root, **env), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for i in range(n)]
    try:
        t0 = time.time()
        while len(list(root.glob("go.ready.*"))) < n and time.time() - t0 < 60:
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.01)
        barrier.touch()
        yield procs
        outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (o, e) in zip(procs, outs):
        assert "Traceback" not in e, e
        ch = _parse(subprocess.CompletedProcess([], p.returncode, o, e))
        assert_all_ok(ch)


@needs_ld
def test_eight_processes_compile_link_and_evict_at_a_tiny_cap(tmp_path):
    """Eight processes, each compiling three new shapes (and linking them) into a cache
    already at its 1 MiB cap: eviction, linking and writes all race."""
    from jitdl.cache.store import pack
    write_module(tmp_path, "kmod", KMOD)
    write_module(tmp_path, "khelper", KHELPER)
    kdir = tmp_path / "cache" / "kernels"
    kdir.mkdir(parents=True)
    (tmp_path / "cache" / "aliases").mkdir()
    for d in (kdir.parent, kdir, kdir.parent / "aliases"):
        d.chmod(0o700)
    i, total = 0, 0
    while total < CAP - 20000:
        data = _filler(9000, pack)
        (kdir / (hashlib.sha256(f"f{i}".encode()).hexdigest() + ".jdk")).write_bytes(data)
        i, total = i + 1, total + len(data)

    def calls(n):
        return [fresh(call("scaled", [("X", (n + 2, k + 3))], "(X + 1.0) * 2.0"))
                for k in range(3)] + [fresh(SOFTMAX)]
    for _ in _race(tmp_path, 8, calls, JITDL_CACHE_MAX_BYTES=CAP):
        pass
    v = run_cli(tmp_path, "verify", JITDL_CACHE_MAX_BYTES=CAP)
    assert v.returncode == 0 and " 0 damaged" in v.stdout, v.stdout
    assert leftovers(tmp_path) == [] and junk(tmp_path) == []
    again = run_child(tmp_path, [fresh(SOFTMAX)], JITDL_CACHE_MAX_BYTES=CAP)
    assert_all_ok(again)
    assert again["softmax"]["result"] == "hit"


def test_cache_clear_while_processes_compile(tmp_path):
    """`cache clear` in a loop while four processes compile: every process still returns
    correct results, and the cache is consistent afterwards."""
    from jitdl.cache.store import Store
    write_module(tmp_path, "kmod", KMOD)
    write_module(tmp_path, "khelper", KHELPER)
    st = Store(str(tmp_path / "cache"), 1 << 30)

    def calls(n):
        return [fresh(call("scaled", [("X", (n + 2, k + 3))], "(X + 1.0) * 2.0"))
                for k in range(3)] + std()
    cleared = 0
    for procs in _race(tmp_path, 4, calls):
        while any(p.poll() is None for p in procs):
            st.clear()
            cleared += 1
    assert cleared > 0
    v = run_cli(tmp_path, "verify")
    assert v.returncode == 0 and " 0 damaged" in v.stdout, v.stdout
    assert leftovers(tmp_path) == [] and junk(tmp_path) == []
    ch = run_child(tmp_path, std())
    assert_all_ok(ch)
    ch = run_child(tmp_path, std())
    assert [r["result"] for r in ch.results] == ["hit"] * 3


def test_threads_compile_different_shapes_and_functions_at_once(tmp_path):
    write_module(tmp_path, "kmod", KMOD)
    write_module(tmp_path, "khelper", KHELPER)
    code = '''\
        import json, threading, traceback
        import numpy as np
        import kmod
        refs = {"scaled": lambda x: (x + 1.0) * 2.0,
                "softmax": lambda x: np.exp(x - x.max(1, keepdims=True))
                / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)}
        out, errors, barrier = [], [], threading.Barrier(12)

        def work(i):
            try:
                name = ("scaled", "softmax")[i % 2]
                X = np.random.default_rng().standard_normal((i // 2 + 2, 7)).astype(np.float32)
                barrier.wait()
                y = getattr(kmod, name)(X)
                out.append(bool(y.shape == X.shape and np.allclose(
                    y, refs[name](X.astype(np.float64)), rtol=1e-4, atol=1e-5)))
            except Exception:
                errors.append(traceback.format_exc())
        ts = [threading.Thread(target=work, args=(i,)) for i in range(12)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        print("RESULT " + json.dumps({"ok": out, "errors": errors, "results": sorted(
            e["result"] for f in (kmod.scaled, kmod.softmax) for e in f.cache_info()["events"])}))
        '''
    cold = result_of(run_script(tmp_path, code))
    assert cold["errors"] == [] and cold["ok"] == [True] * 12, cold
    assert cold["results"] == ["compiled"] * 12
    hot = result_of(run_script(tmp_path, code))
    assert hot["errors"] == [] and hot["ok"] == [True] * 12, hot
    assert hot["results"] == ["hit"] * 12


def test_threads_print_ir_while_llvmlite_would_build_its_escape_table(tmp_path):
    """llvmlite builds the table that escapes strings in printed IR on its first use: a
    thread that printed a module while another was building it failed with KeyError(98)
    (the "b" of !"branch_weights"), once in several runs of the test above. Here every
    entry of the table takes a thread switch, so the threads would print their modules
    while it is built, unless jitdl built it on import."""
    write_module(tmp_path, "kmod", KMOD)
    write_module(tmp_path, "khelper", KHELPER)
    code = '''\
        import json, threading, time, traceback
        import numpy as np
        import llvmlite.ir.values as values

        escape = getattr(values, "_escape_string", None)
        table = (getattr(escape, "__defaults__", None) or (None,))[0]
        if not isinstance(table, dict) or table:
            print("RESULT " + json.dumps({"skip": "this llvmlite has no escape table "
                                                  "built on first use"}))
            raise SystemExit

        class SlowTable(dict):
            def __setitem__(self, key, value):      # a thread switch at every entry
                time.sleep(0.001)
                super().__setitem__(key, value)

        escape.__defaults__ = (SlowTable(),)
        import kmod
        errors, barrier = [], threading.Barrier(8)

        def work(i):
            try:
                X = np.random.default_rng().standard_normal((i // 2 + 2, 7)).astype(np.float32)
                barrier.wait()
                getattr(kmod, ("scaled", "softmax")[i % 2])(X)
            except Exception:
                errors.append(traceback.format_exc())
        ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        print("RESULT " + json.dumps({"errors": errors}))
        '''
    res = result_of(run_script(tmp_path, code))
    if "skip" in res:
        pytest.skip(res["skip"])
    assert res["errors"] == [], "\n".join(res["errors"])


# ============================================================================ fork

def test_fork_right_after_import(probes):
    rc, out, err = collect(probes, "fork_import")
    assert rc is not None, "the parent hung"
    assert "STATUS 0" in out, f"the forked child hung or died:\n{out}\n{err[-2000:]}"
    res = json.loads(out.split("CHILD ", 1)[1].splitlines()[0])
    assert res["ok"]


def test_fork_after_a_parallel_kernel(probes):
    rc, out, err = collect(probes, "fork_parallel")
    assert rc is not None, "the parent hung"
    assert "STATUS 0" in out, f"the forked child hung or died:\n{out}\n{err[-2000:]}"
    res = json.loads(out.split("CHILD ", 1)[1].splitlines()[0])
    assert res["ok"]


def test_fork_while_other_threads_hold_jitdls_locks(tmp_path):
    """A fork while another thread compiles (holding its function's lock, the cache's, the
    library table's) left the child waiting for ever on its first compile; and a child
    inherited the parent's background tuner (its jobs never ran) and, exiting, killed the
    parent's tuning workers. Locks are new in the child, and so is its tuner."""
    code = '''
        import json, os, threading, faulthandler
        import numpy as np
        import jitdl as jd
        from jitdl.autotune import background, measure
        from jitdl.cache.store import default_store
        from jitdl.runtime import native

        @jd.compute
        def scale(X):
            return jd.tensor(X.shape, lambda i, j: X[i, j] * 2.0 + 1.0)

        scale(np.ones((2, 3)))
        parents_tuner = background.get()
        held, done = threading.Event(), threading.Event()

        def hold():
            with scale._lock, native._loaded_lock, default_store()._lock:
                held.set()
                done.wait()
        t = threading.Thread(target=hold)
        t.start()
        held.wait()
        pid = os.fork()
        if pid == 0:
            faulthandler.dump_traceback_later(60, exit=True)     # a hang: exit status 1
            x = np.random.default_rng(1).uniform(1, 2, (5, 11))
            ok = bool(np.allclose(scale(x), x * 2 + 1))
            fresh = background.get() is not parents_tuner and not any(
                p.procs for p in measure._pools)
            os._exit(0 if ok and fresh else 3)
        _, status = os.waitpid(pid, 0)
        done.set()
        t.join()
        print("RESULT " + json.dumps(os.waitstatus_to_exitcode(status)))
        '''
    assert result_of(run_script(tmp_path, code)) == 0


# ============================================================================ odd files

def test_a_fifo_in_place_of_an_entry_does_not_hang(probes):
    rc, out, err = collect(probes, "fifo")
    assert rc is not None, "jitdl hung opening the FIFO"
    ch = _parse(subprocess.CompletedProcess([], rc, out, err))
    assert_all_ok(ch)
    assert ch["softmax"]["result"] == "compiled"


def test_cli_list_survives_metadata_without_fname(warm):
    victim = kernel_of(warm, "softmax")
    meta = dict(entry(victim).meta)
    del meta["fname"]
    repack(victim, meta)
    for cmd in ("list", "info"):
        p = run_cli(warm, cmd)
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-1500:]


def test_cache_dir_that_is_a_file_a_dangling_link_or_a_link(tmp_path):
    write_module(tmp_path, "kmod", KMOD)
    write_module(tmp_path, "khelper", KHELPER)
    (tmp_path / "afile").write_text("not a directory")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "x")
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    for d in ("afile", "dangling"):
        ch = run_child(tmp_path, [fresh(SCALED)], JITDL_CACHE_DIR=str(tmp_path / d))
        assert_all_ok(ch)
        assert ch["scaled"]["result"] == "compiled" and ch["scaled"]["cache_dir"] is None
        assert "kernel cache disabled" in ch.stderr and str(tmp_path / d) in ch.stderr
        c = run_cli(tmp_path, "info", JITDL_CACHE_DIR=str(tmp_path / d))
        assert c.returncode == 1 and "not usable" in c.stdout and "Traceback" not in c.stderr
    assert (tmp_path / "afile").read_text() == "not a directory"
    for expected in ("compiled", "hit"):
        ch = run_child(tmp_path, [fresh(SCALED)], JITDL_CACHE_DIR=str(tmp_path / "link"))
        assert_all_ok(ch)
        assert ch["scaled"]["result"] == expected
    assert len(list((tmp_path / "real" / "kernels").glob("*.jdk"))) == 1


def test_a_relative_cache_dir_survives_chdir(tmp_path):
    write_module(tmp_path, "kmod", KMOD)
    write_module(tmp_path, "khelper", KHELPER)
    (tmp_path / "work").mkdir()
    (tmp_path / "elsewhere").mkdir()
    code = f'''\
        import json, os
        import numpy as np
        import kmod
        rng = np.random.default_rng()
        ok = []
        for shape in ((3, 4), (5, 4)):
            X = rng.standard_normal(shape).astype(np.float32)
            ok.append(bool(np.allclose(kmod.scaled(X), (X.astype(np.float64) + 1) * 2,
                                       rtol=1e-5, atol=1e-5)))
            os.chdir({str(tmp_path / "elsewhere")!r})
        print("RESULT " + json.dumps({{"ok": ok, "results": [
            e["result"] for e in kmod.scaled.cache_info()["events"]]}}))
        '''
    first = run_script(tmp_path, code, cwd=tmp_path / "work", JITDL_CACHE_DIR="relcache")
    assert result_of(first)["ok"] == [True, True]
    second = result_of(run_script(tmp_path, code, cwd=tmp_path / "work",
                                  JITDL_CACHE_DIR="relcache"))
    assert second["ok"] == [True, True]
    assert "CacheWarning" not in first.stderr, first.stderr[-1500:]
    assert second["results"] == ["hit", "hit"], second


# ============================================================================ file systems

@pytest.fixture
def tmpfs(warm):
    """Mount a small tmpfs over warm/cache (the warm entries copied onto it)."""
    if not IS_ROOT or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    cache = warm / "cache"
    saved = warm / "saved-cache"
    cache.rename(saved)
    cache.mkdir()
    mounted = []

    def mount(size, warm_entries=True, remount=None):
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                            str(cache)], capture_output=True, text=True)
        if p.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
        mounted.append(cache)
        if warm_entries:
            for d in ("kernels", "aliases"):
                shutil.copytree(saved / d, cache / d)
        if remount:
            subprocess.run(["mount", "-o", f"remount,{remount}", str(cache)], check=True)
        return warm
    yield mount
    for m in mounted:
        subprocess.run(["umount", "-l", str(m)], capture_output=True)


NEW_SHAPE = call("scaled", [("X", (5, 7))], "(X + 1.0) * 2.0")


@needs_ld
def test_a_read_only_cache_file_system(tmpfs):
    root = tmpfs("1m", remount="ro")
    ch = run_child(root, std() + [fresh(NEW_SHAPE)])
    assert_all_ok(ch)
    # (the hits' libraries dlopened from a private temporary directory, as the cache's
    # cannot take them)
    assert [(r["result"], r["loader"]) for r in ch.results] == \
        [("hit", "shared library")] * 3 + [("compiled", "mcjit")]
    assert ch.stderr.count("could not write to the kernel cache") == 1, ch.stderr
    assert "Read-only file system" in ch.stderr and "Traceback" not in ch.stderr
    for cmd in ("info", "list", "verify"):
        c = run_cli(root, cmd)
        assert c.returncode == 0 and "Traceback" not in c.stderr, (cmd, c.stderr)


@needs_ld
def test_a_noexec_cache_file_system(tmpfs):
    """dlopen of the library fails (noexec): MCJIT loads the object code instead."""
    root = tmpfs("1m", remount="noexec")
    ch = run_child(root, std())
    assert_all_ok(ch)
    assert [(r["result"], r["loader"]) for r in ch.results] == [("hit", "mcjit")] * 3
    assert "cannot dlopen the cached library" in ch.stderr
    assert junk(root) == []


def test_a_full_cache_file_system(tmpfs):
    """40 KB: the first entries fit, later writes hit ENOSPC. Never a crash, never a half
    entry, and the next process hits what was stored."""
    root = tmpfs("40k", warm_entries=False)
    calls = std() + [fresh(NEW_SHAPE)]
    cold = run_child(root, calls)
    assert_all_ok(cold)
    assert "No space left on device" in cold.stderr and "Traceback" not in cold.stderr
    assert leftovers(root) == []
    v = run_cli(root, "verify")
    assert v.returncode == 0 and " 0 damaged" in v.stdout, v.stdout
    stored = len(kernel_files(root))
    assert 0 < stored <= 4
    again = run_child(root, [dict(c, seed=c["seed"] + 1) for c in calls])
    assert_all_ok(again)
    assert sum(r["result"].startswith("hit") for r in again.results) >= stored
    assert leftovers(root) == []


# ============================================================================ linkers

@needs_ld
@pytest.mark.parametrize("linker", ["/bin/false", "/nonexistent/ld", "garbage"])
def test_a_broken_linker_falls_back_to_mcjit(tmp_path, linker):
    write_module(tmp_path, "kmod", KMOD)
    write_module(tmp_path, "khelper", KHELPER)
    if linker == "garbage":                      # exits 0 after writing random bytes
        ld = tmp_path / "garbage-ld"
        ld.write_text('#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -o ] && '
                      'head -c 5000 /dev/urandom > "$2"; shift; done\nexit 0\n')
        ld.chmod(0o755)
        linker = str(ld)
    calls = [fresh(SCALED), fresh(MATMUL)]
    for expected in ("compiled", "hit"):
        ch = run_child(tmp_path, calls, JITDL_LINKER=linker)
        assert_all_ok(ch)
        assert [(r["result"], r["loader"]) for r in ch.results] == [(expected, "mcjit")] * 2
        assert "Traceback" not in ch.stderr and "Warning" not in ch.stderr, ch.stderr
    assert junk(tmp_path) == []


@needs_ld
def test_an_unloadable_library_is_replaced_by_a_working_linker(tmp_path):
    write_module(tmp_path, "kmod", KMOD)
    write_module(tmp_path, "khelper", KHELPER)
    ld = tmp_path / "garbage-ld"
    ld.write_text('#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -o ] && '
                  'head -c 5000 /dev/urandom > "$2"; shift; done\nexit 0\n')
    ld.chmod(0o755)
    run_child(tmp_path, [fresh(SCALED)], JITDL_LINKER=str(ld))
    healthy = run_child(tmp_path, [fresh(SCALED)])         # default ld
    assert_all_ok(healthy)
    final = run_child(tmp_path, [fresh(SCALED)])
    assert_all_ok(final)
    assert final["scaled"]["loader"] == "shared library", final.stderr


# ============================================================================ export / load

EXPORT_PROBE = '''\
import json, os, struct, sys
import numpy as np
import jitdl as jd
import kmod
from jitdl.cache.store import pack, unpack

d = sys.argv[1]
res = {}
rng = np.random.default_rng()
X = rng.standard_normal((4, 6)).astype(np.float32)
path = os.path.join(d, "scaled.jdx")
kmod.scaled.export(path, X)
res["mode"] = oct(os.stat(path).st_mode & 0o777)
umask = os.umask(0)
os.umask(umask)
res["expected_mode"] = oct(0o666 & ~umask)
Z = rng.standard_normal((4, 6)).astype(np.float32)
res["ok"] = bool(np.allclose(jd.load(path)(Z), (Z.astype(np.float64) + 1) * 2,
                             rtol=1e-5, atol=1e-5))
data = open(path, "rb").read()

# an export onto a directory fails; what does it leave next to it?
os.mkdir(os.path.join(d, "target"))
before = set(os.listdir(d))
try:
    kmod.scaled.export(os.path.join(d, "target"), X)
    res["dir_export"] = "no error"
except Exception as e:
    res["dir_export"] = type(e).__name__
res["dir_leftovers"] = sorted(set(os.listdir(d)) - before)

# truncated and bit-flipped files: JitdlError, or a function that computes correctly
bad, t = {}, os.path.join(d, "t.jdx")
cases = [data[:n] for n in list(range(0, 64)) + list(range(64, len(data), 53))]
for i in range(8, 28):                           # header fields: count, first length
    for bit in range(8):
        b = bytearray(data)
        b[i] ^= 1 << bit
        cases.append(bytes(b))
for case in cases:
    with open(t, "wb") as f:
        f.write(case)
    try:
        g = jd.load(t)
        if not np.allclose(g(Z), (Z.astype(np.float64) + 1) * 2, rtol=1e-5, atol=1e-5):
            bad.setdefault("wrong result", len(case))
    except jd.JitdlError:
        pass
    except Exception as e:
        bad.setdefault(f"{type(e).__name__}: {e}"[:120], len(case))
res["bad"] = bad

# made for another CPU
(n,) = struct.unpack_from("<Q", data, 12)
e = unpack(data[20:20 + n])
meta = dict(e.meta, features=e.meta["features"] + ",+jitdl-made-up-feature")
blob = pack(meta, e.obj, dict(e.texts))
with open(t, "wb") as f:
    f.write(data[:12] + struct.pack("<Q", len(blob)) + blob)
try:
    jd.load(t)
    res["other_cpu"] = "loaded"
except jd.JitdlError as ex:
    res["other_cpu"] = str(ex)
for name, p in (("missing", os.path.join(d, "nope.jdx")), ("directory", d)):
    try:
        jd.load(p)
        res[name] = "loaded"
    except Exception as ex:
        res[name] = type(ex).__name__ + ": " + str(ex)
print("RESULT " + json.dumps(res))
'''


@pytest.fixture(scope="module")
def export_probe(template, tmp_path_factory):
    d = tmp_path_factory.mktemp("export")
    (d / "probe.py").write_text(EXPORT_PROBE)
    p = subprocess.run([PY, str(d / "probe.py"), str(d)], cwd=str(d),
                       env=base_env(template, JITDL_CACHE="0"), capture_output=True,
                       text=True, timeout=TIMEOUT)
    return result_of(p)


def test_export_for_another_cpu_or_a_missing_file(export_probe):
    res = export_probe
    assert res["ok"]
    assert "jitdl-made-up-feature" in res["other_cpu"] and "lacks" in res["other_cpu"]
    assert res["missing"].startswith("FileNotFoundError") and "nope.jdx" in res["missing"]
    assert res["directory"].startswith("IsADirectoryError")


def test_a_truncated_or_bit_flipped_export_raises_jitdl_error(export_probe):
    assert export_probe["bad"] == {}, export_probe["bad"]


def test_a_failed_export_leaves_no_temporary_file(export_probe):
    assert export_probe["dir_export"] == "IsADirectoryError"
    assert export_probe["dir_leftovers"] == []


def test_an_export_gets_the_umask_mode(export_probe):
    assert export_probe["mode"] == export_probe["expected_mode"], export_probe["mode"]


@pytest.mark.parametrize("was_on", [True, False])
def test_the_collector_pause_of_code_generation_is_counted_across_threads(was_on):
    """Code generation turns Python's collector off while it builds a module. Each thread
    saving and restoring it alone could leave it off for good (one thread's restore
    between another's check and its disable); counted, the last thread out restores what
    the first found, in any order of entries and exits."""
    import gc
    import threading
    from jitdl.codegen.llvm import collector_paused
    (gc.enable if was_on else gc.disable)()
    try:
        a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
        seen = {}

        def a():
            with collector_paused():
                a_in.set()
                b_in.wait(5)
            a_out.set()

        def b():
            a_in.wait(5)
            with collector_paused():
                b_in.set()
                a_out.wait(5)
                seen["inside after a left"] = gc.isenabled()
        ts = [threading.Thread(target=a), threading.Thread(target=b)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(10)
        assert seen == {"inside after a left": False}
        assert gc.isenabled() is was_on
    finally:
        gc.enable()


def test_a_child_forked_during_code_generation_has_the_collector_on():
    """A process forked while a thread generates code (the collector paused) does not
    inherit the pause: nothing in the child would end it."""
    import gc
    import threading
    from jitdl.codegen.llvm import collector_paused
    gc.enable()
    inside, leave = threading.Event(), threading.Event()

    def generate():
        with collector_paused():
            inside.set()
            leave.wait(10)
    t = threading.Thread(target=generate)
    t.start()
    try:
        assert inside.wait(10) and not gc.isenabled()
        pid = os.fork()
        if pid == 0:                                    # the child: report and leave
            with collector_paused():
                pass
            os._exit(0 if gc.isenabled() else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        leave.set()
        t.join(10)
    assert gc.isenabled()


def test_alias_records_read_again_only_what_changed(tmp_path):
    """alias_records keeps what it read: an alias rewritten, removed or made writable by
    others since is seen as it is now, never as it was."""
    from jitdl.cache.store import Store
    st = Store(str(tmp_path / "cache"), 1 << 30)
    keys = ["%064x" % i for i in range(3)]
    for k in keys:
        st.alias(k, "f" * 64, "mod.f", {"args": k})
    assert {k: r["parts"]["args"] for k, r in st.alias_records()} == {k: k for k in keys}
    st.alias(keys[0], "e" * 64, "mod.g", {"args": "new"})     # rewritten
    os.unlink(os.path.join(st.aliases, keys[1] + ".json"))  # removed
    records = dict(st.alias_records())
    assert sorted(records) == [keys[0], keys[2]]
    assert records[keys[0]]["fname"] == "mod.g" and records[keys[0]]["full"] == "e" * 64
    path = os.path.join(st.aliases, keys[2] + ".json")
    os.chmod(path, 0o666)                                   # no longer trusted
    from jitdl.cache.store import CacheWarning
    with pytest.warns(CacheWarning, match="group or others can write it"):
        assert keys[2] not in dict(st.alias_records())


def test_a_process_scans_the_size_only_when_its_writes_may_have_filled_the_room(tmp_path):
    """The eviction pass (a stat of every entry) runs at a process's first write, then
    once it has written 1/64 of the cap (or the room left) since: a put is not a scan of
    the whole directory, yet a write that passes the cap is followed by an eviction."""
    from jitdl.cache.store import Store
    st = Store(str(tmp_path / "cache"), CAP)
    scans = []
    listed = st._kernel_files
    st._kernel_files = lambda: scans.append(1) or listed()
    for i in range(40):                      # about 3 KB each, a scan every 16 KB
        st.put("%064x" % i, {"fname": "f"}, os.urandom(3000), {})
    assert 1 < len(scans) <= 10, len(scans)
    for i in range(40, 80):                  # 50 KB each: past the 1 MiB cap
        st.put("%064x" % i, {"fname": "f"}, os.urandom(50000), {})
        assert st.size() <= CAP


FORKED_HITS = r"""
import os, sys, time
from jitdl.cache.store import Store
root = sys.argv[1]
st = Store(root, 1 << 30)
st._count_hit("parent"); st.flush_hits()        # the parent's connection is open
st._count_hit("unwritten")                       # a hit the parent has not written yet
pid = os.fork()
if pid == 0:                                     # exits the ordinary way: atexit runs
    st.flush_hits()
    sys.exit(0)
os.waitpid(pid, 0)
kids = []
for w in range(3):
    pid = os.fork()
    if pid == 0:
        for i in range(150):
            st._count_hit(f"k{w}-{i}")
            st.flush_hits()
            time.sleep(0.002)
        os._exit(0)
    kids.append(pid)
for i in range(50):
    st._count_hit(f"p-{i}"); st.flush_hits()
time.sleep(0.1)
st.flush_hits()
st._db.close(); st._db = None    # the parent is done while its children still write
print([os.waitpid(pid, 0)[1] for pid in kids])
"""


def test_hits_of_children_forked_with_the_stats_connection_open_are_kept(tmp_path):
    """A forked child wrote its hits through the parent's stats.sqlite connection: once
    the parent closed its own, sqlite (its record of the file's locks is per process)
    checkpointed the WAL away under the children, and of 450 hits 130-440 were kept. A
    child that exited the ordinary way also wrote the parent's unwritten hits again."""
    from jitdl.cache.store import Store
    root = str(tmp_path / "cache")
    out = subprocess.run([PY, "-c", FORKED_HITS, root], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[0, 0, 0]", out.stdout + out.stderr
    hits = Store(root, 1 << 30).hits()
    for w in range(3):
        assert sorted(k for k in hits if k.startswith(f"k{w}-")) == sorted(
            f"k{w}-{i}" for i in range(150)), w
    assert len([k for k in hits if k.startswith("p-")]) == 50
    assert hits["parent"] == 1 and hits["unwritten"] == 1, hits


def test_an_entry_rewritten_with_its_library_is_not_compressed_again(tmp_path, monkeypatch):
    """A cold compile's entry is written, then rewritten when its shared library is
    linked (add_shared), as is a disk hit's that had none: both packed the texts anew
    (json and zlib, 0.6-2.3 ms each for a matmul's); the compressed bytes are now made
    once and reused, and the texts read back are the ones written."""
    import zlib
    from jitdl.cache.store import Entry, Store, Texts
    st = Store(str(tmp_path / "cache"), 1 << 30)
    texts = {"loop_ir": "for i in range(7):\n" * 50, "llvm_ir": "define void @f()\n" * 80}
    meta, key = {"fname": "mod.f"}, "a" * 64
    written = Texts.of(texts)
    real, calls = zlib.compress, []
    monkeypatch.setattr(zlib, "compress", lambda *a, **k: calls.append(a) or real(*a, **k))
    st.put(key, meta, b"object code", written)
    st.add_shared(key, Entry(meta, b"object code", written), b"library 1")
    entry = st.get(key)
    assert entry.shared == b"library 1" and dict(entry.texts) == texts
    st.add_shared(key, entry, b"library 2")            # an entry read back, relinked
    entry = st.get(key)
    assert entry.shared == b"library 2" and dict(entry.texts) == texts
    assert calls == []
    st.put("b" * 64, meta, b"object code", texts)       # a plain dict: compressed here
    assert len(calls) == 1 and dict(st.get("b" * 64).texts) == texts
