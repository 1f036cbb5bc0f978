"""Large kernel outputs come from memory that is reused (jitdl.runtime.pool): ordinary
NumPy arrays that own their data, correct whatever the block held before, freed through
the policy from any thread and at interpreter exit."""
import ctypes
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import jitdl as jd
from jitdl.config import settings
from jitdl.runtime import pool

jnp = jd.numpy
N = pool.MIN_BYTES // 4 + 1000          # float32 elements of a pooled output

needs_pool = pytest.mark.skipif(pool._policy() is None, reason="the pool is off here "
                                "(JITDL_POOL_BYTES below pool.MIN_BYTES)")


def handler_of(a):
    return np._core.multiarray.get_handler_name(a)


@needs_pool
def test_a_large_output_owns_reused_memory_and_is_right():
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    pool.release()
    c = jnp.add(a, b)
    assert c.flags.owndata and c.flags.c_contiguous and c.flags.writeable
    assert handler_of(c) == "jitdl_pool"
    np.testing.assert_array_equal(c, a + b)
    where = c.ctypes.data
    c[:] = np.nan                       # garbage left for the next user of the block
    del c
    assert pool.cached_bytes() >= N * 4
    d = jnp.multiply(a, b)
    assert d.ctypes.data == where       # the freed block came back
    np.testing.assert_array_equal(d, a * b)   # every element written over the NaNs
    assert handler_of(jnp.add(a[:10], b[:10])) != "jitdl_pool"   # small: NumPy's own


@needs_pool
def test_pooled_arrays_resize_and_calloc_through_the_policy():
    a = pool.empty((N,), np.float32)
    a[:] = 3
    a.resize((2 * N,), refcheck=False)
    assert a.shape == (2 * N,) and np.all(a[:N] == 3) and np.all(a[N:] == 0)
    del a
    old = pool._policy()[1](pool._policy()[0])
    try:
        z = np.zeros(N, np.float64)     # calloc under the policy
    finally:
        pool._policy()[1](old)
    assert handler_of(z) == "jitdl_pool" and not z.any()


@needs_pool
def test_the_pool_keeps_at_most_its_budget_and_releases():
    blocks = [pool.empty((N + 64 * i,), np.float32) for i in range(2 * pool.SLOTS)]
    del blocks
    assert 0 < pool.cached_bytes() <= min(pool.SLOTS * (N + 64 * 2 * pool.SLOTS) * 4,
                                          settings.pool_bytes)
    pool.release()
    assert pool.cached_bytes() == 0
    a = pool.empty((N,), np.float32)        # a release leaves the policy working
    a[:] = 1
    assert a.sum() == N


@needs_pool
def test_threads_allocate_and_free_concurrently():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(N).astype(np.float32)
    bad = []

    def work(k):
        for i in range(30):
            y = jnp.multiply(x, float(k + i))
            if not np.array_equal(y, x * np.float32(k + i)):
                bad.append((k, i))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def run_child(code, env=None):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


def test_arrays_alive_at_exit_and_a_disabled_pool():
    code = f"""
        import numpy as np, jitdl as jd
        a = np.random.default_rng(0).standard_normal({N}).astype(np.float32)
        kept = jd.numpy.add(a, a)               # still alive when the process ends
        print(np._core.multiarray.get_handler_name(kept), float(kept[5] - 2 * a[5]))
        """
    r = run_child(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[1] == "0.0"
    r = run_child(code, {"JITDL_POOL_BYTES": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "default_allocator"


ROWS = pool.MIN_BYTES // 4000 + 8      # float32 rows of 1000: a temporary above MIN_BYTES


def two_step():
    """A definition whose intermediate (ROWS x 1000 float32, left at the root by its
    schedule) is a heap temporary larger than MIN_BYTES, with a small output."""
    @jd.compute
    def two_step(X):
        t = jnp.exp(X * 0.5)
        return jnp.sum(t * t, axis=1)

    @jd.schedule(two_step, target="cpu")
    def sched(s, cfg):
        pass

    return two_step


@needs_pool
def test_kernel_temporaries_are_reused_through_the_pool():
    f = two_step()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((ROWS, 1000)).astype(np.float32)
    ref = np.exp(x.astype(np.float64)).sum(axis=1)
    assert "(global)" in str(f.lower(x))          # the temporary is on the heap
    pool.release()
    np.testing.assert_allclose(f(x), ref, rtol=1e-5)
    assert pool.cached_bytes() >= x.nbytes        # freed into the pool, kept
    for k in range(3):                            # taken back, whatever it held
        y = x[::-1].copy() + k
        np.testing.assert_allclose(f(y), np.exp(y.astype(np.float64)).sum(axis=1),
                                   rtol=1e-5)
    assert pool.cached_bytes() <= settings.pool_bytes


@pytest.mark.parametrize("pool_bytes", ["default", "0"])
def test_kernel_temporaries_from_the_cache_and_without_the_pool(tmp_path, pool_bytes):
    """A kernel loaded from the disk cache in a later process (its shared library,
    through dlopen, where there is a linker) gets the pool's hooks too; with the pool
    off its temporaries come from aligned_alloc."""
    code = f"""
        import sys, numpy as np, jitdl as jd
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from jitdl.runtime import native, pool
        from test_pool import two_step, ROWS
        f = two_step()
        x = np.random.default_rng(4).standard_normal((ROWS, 1000)).astype(np.float32)
        ok = np.allclose(f(x), np.exp(x.astype(np.float64)).sum(axis=1), rtol=1e-5)
        pool._wait_for_build()      # (the pool is compiled on a thread; hooks set after)
        ok = ok and np.allclose(f(x), np.exp(x.astype(np.float64)).sum(axis=1), rtol=1e-5)
        native.drain()
        print(ok, pool.cached_bytes() >= x.nbytes,
              sorted({{type(k.loaded).__name__ for k in f._kernels.values()}})[0])
        """
    env = {"JITDL_CACHE_DIR": str(tmp_path)}
    if pool_bytes != "default":
        env["JITDL_POOL_BYTES"] = pool_bytes
    first, second = run_child(code, env), run_child(code, env)
    for r in (first, second):
        assert r.returncode == 0, r.stderr
    assert first.stdout.split()[:2] == ["True", str(pool_bytes == "default")]
    assert second.stdout.split() == ["True", str(pool_bytes == "default"),
                                     "SharedLoaded" if shutil.which("ld") else "Loaded"]



def test_the_pools_code_comes_from_the_disk_cache_in_later_processes(tmp_path):
    """The policy's functions are compiled once and stored like a kernel: a later process
    loads their shared library (dlopen, where there is a linker) instead of compiling them
    again (25 ms of every process's first large output), and they work there."""
    code = f"""
        import numpy as np, jitdl as jd
        from jitdl.runtime import native, pool
        a = np.random.default_rng(0).standard_normal({N}).astype(np.float32)
        b = jd.numpy.add(a, a)
        c = jd.numpy.multiply(b, 3.0)
        del b
        d = jd.numpy.add(a, 1.0)            # (b's block, handed back)
        native.drain()
        print(np._core.multiarray.get_handler_name(c), type(pool._state["loaded"]).__name__,
              bool(np.array_equal(c, (a + a) * np.float32(3))),
              bool(np.array_equal(d, a + np.float32(1))))
        """
    env = {"JITDL_CACHE_DIR": str(tmp_path)}
    first, second = run_child(code, env), run_child(code, env)
    for r in (first, second):
        assert r.returncode == 0, r.stderr
    assert first.stdout.split() == ["jitdl_pool", "Loaded", "True", "True"]
    assert second.stdout.split() == ["jitdl_pool", "SharedLoaded" if shutil.which("ld")
                                     else "Loaded", "True", "True"]


def test_a_cache_entry_of_the_pools_key_without_its_globals_is_compiled_again(tmp_path):
    """A checksummed entry under the pool's key whose code lacks jd_pool_ctx (a foreign or
    older module): the pool's code is compiled again, rather than the context's address
    written to address 0 (a segfault of the first large output)."""
    plant = """
        from jitdl.cache import keys
        from jitdl.cache.store import default_store
        from jitdl.runtime import engine, pool
        from jitdl.target import get
        ir = pool._IR.format(slots=pool.SLOTS, header=pool._HEADER, min_bytes=pool.MIN_BYTES)
        key = keys.digest("jitdl.runtime.pool", ir, sorted(keys.environment(get("cpu")).items()))
        obj = engine.object_code(ir.replace("@jd_pool_ctx", "@jd_pool_ctx_not"))
        default_store().put(key, {"fname": "jitdl.runtime.pool", "call": ""}, obj, {})
        """
    code = f"""
        import numpy as np, jitdl as jd
        from jitdl.runtime import pool
        a = np.random.default_rng(0).standard_normal({N}).astype(np.float32)
        b = jd.numpy.add(a, a)
        print(np._core.multiarray.get_handler_name(b), bool(np.array_equal(b, a + a)))
        """
    for linker in ("ld", "0"):          # the entry loaded by dlopen, and by MCJIT
        env = {"JITDL_CACHE_DIR": str(tmp_path / linker), "JITDL_LINKER": linker}
        r = run_child(plant, env)
        assert r.returncode == 0, r.stderr
        r = run_child(code, env)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["jitdl_pool", "True"]


def test_a_kernel_dropped_before_the_pool_is_built():
    """Kernels loaded and dropped while the pool is still compiled on its thread: the
    thread then wrote the hooks into their unmapped code (a segfault); the pool now holds
    each until its hooks are set."""
    code = f"""
        import gc, numpy as np, jitdl as jd
        from jitdl import pipeline
        from jitdl.runtime import engine, pool
        from jitdl.runtime.kernel import Kernel
        from jitdl.target import get

        @jd.compute
        def mm(A, B):                   # B packed: a heap temporary
            return jd.numpy.matmul(A, B)

        target = get("cpu")
        rng = np.random.default_rng(5)
        a, b = (rng.standard_normal((200, 200)).astype(np.float32) for _ in range(2))
        ref = a.astype(np.float64) @ b
        graph = mm._trace(mm._specs(mm._args((a, b), {{}})))
        low = pipeline.lower(graph, target, pipeline.Options("mm", False, 2))
        art = pipeline.build(low, target, pipeline.Options("mm", False, 2))
        assert "module" not in pool._state      # (nothing has built the pool yet)
        kern = Kernel(art.signature, engine.Loaded(art.obj, art.signature.symbol))
        assert all(kern.loaded.heap_hooks) and "module" not in pool._state
        ok = np.allclose(kern((a, b)), ref, rtol=1e-4, atol=1e-3)
        del kern
        gc.collect()                # its code unmapped, unless the pool still holds it
        pool._wait_for_build()
        print(ok)
        """
    r = run_child(code, {"JITDL_CACHE": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == "True"


def test_heap_buffers_are_noalias_for_llvm():
    """A kernel's heap buffers come from one out-of-line function whose result is marked
    noalias: without it LLVM could not keep a register tile that accumulates into a heap
    intermediate in registers (each multiply-add loaded and stored its element)."""
    @jd.compute
    def qk(Q, K):
        return jnp.matmul(Q, jnp.transpose(K, (0, 2, 1))) * 0.125

    q = np.random.default_rng(5).standard_normal((2, 256, 64)).astype(np.float32)
    text = qk.llvm_ir(q, q, optimized=False)
    assert "(global)" in str(qk.lower(q, q))
    heads = [line for line in text.splitlines() if line.startswith("define") and ".alloc" in line]
    assert len(heads) == 1 and "noalias ptr" in heads[0] and "noinline" in heads[0]
    np.testing.assert_allclose(qk(q, q), q.astype(np.float64) @ q.transpose(0, 2, 1) * 0.125,
                               rtol=1e-5, atol=1e-5)


def test_the_pools_code_is_built_by_llvms_fast_code_generator(monkeypatch):
    """The pool's module (hand-written, no optimisation passes) is emitted at code
    generation level 0: at level 3 it took 17-22 ms of CPU, which every process with an
    empty cache spent before its first large output, for functions that run once per
    allocation of at least 4 MiB. The code built so works as the policy's: a freed large
    block is kept and handed back for a request of about its size, a small one is not."""
    from jitdl.runtime import engine
    levels = []
    real = engine._new_target_machine
    monkeypatch.setattr(engine, "_new_target_machine",
                        lambda s, opt=3: levels.append(opt) or real(s, opt))
    ir = pool._IR.format(slots=pool.SLOTS, header=pool._HEADER, min_bytes=pool.MIN_BYTES)
    loaded = engine.Loaded(engine.object_code(ir), "jd_pool_malloc")
    assert levels[0] == 0
    _, address, (ctx_at, cap_at) = pool._parts(loaded)
    ctx = pool._Ctx()
    ctypes.c_void_p.from_address(ctx_at).value = ctypes.addressof(ctx)
    ctypes.c_int64.from_address(cap_at).value = 4 * pool.MIN_BYTES
    fn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
    malloc = fn(address["pool_malloc"])
    free = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        address["pool_free"])
    c = ctypes.addressof(ctx)
    big = malloc(c, pool.MIN_BYTES + 64)
    assert big and big % 16 == 0
    ctypes.memset(big, 7, pool.MIN_BYTES + 64)
    free(c, big, 0)
    assert ctx.cached >= pool.MIN_BYTES and sum(bool(b) for b in ctx.blocks) == 1
    assert malloc(c, pool.MIN_BYTES + 32) == big            # handed back
    assert ctx.cached == 0 and not any(ctx.blocks)
    small = malloc(c, 1000)
    free(c, small, 0)
    free(c, big, 0)
    assert ctx.cached >= pool.MIN_BYTES and sum(bool(b) for b in ctx.blocks) == 1
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address["pool_release"])(c)
    assert ctx.cached == 0 and not any(ctx.blocks) and ctx.lock == 0
