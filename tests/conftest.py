"""Shared fixtures for the jitdl test suite.

The disk cache and the tuning records are pointed at a fresh temporary directory for the
whole session (before jitdl is imported; one per pytest-xdist worker), so tests neither
read stale binaries or records nor litter the user's; child processes find jitdl in this
checkout (PYTHONPATH).
`--update-golden` rewrites the expected loop IR texts of tests/test_golden.py.
"""
import os
import shutil
import tempfile
import zlib

_CACHE_DIR = tempfile.mkdtemp(prefix="jitdl-test-cache-")
os.environ["JITDL_CACHE_DIR"] = _CACHE_DIR
# tuning records likewise: a fresh database per session, and a small background budget
os.environ["JITDL_TUNING_DB"] = os.path.join(_CACHE_DIR, "tuning.sqlite")
os.environ.setdefault("JITDL_TUNE_BUDGET", "12,60s")
# with pytest-xdist (-n auto --dist loadfile: a worker per core, each file in one worker
# and in its order, as a module's tests were written to run) each worker's kernels use a
# share of the cores, at least two so that parallel loops are still compiled and run; a
# team per worker the size of the machine would oversubscribe it that many times over
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
if _WORKERS > 1:
    os.environ.setdefault("JITDL_NUM_THREADS", str(max(2, (os.cpu_count() or 2) // _WORKERS)))
# child processes import jitdl from this checkout too (not from wherever an editable
# install points, e.g. another worktree)
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_CHECKOUT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

# child processes (cache races, tuning workers, the command line) each import jitdl; with
# bytecode writing off (PYTHONDONTWRITEBYTECODE, as on these machines) every one compiled
# all of its modules from source again: a quarter of the time of the files that start them.
# Compiled once here, they are read (writing stays off where it is off).
try:
    import compileall  # noqa: E402
    compileall.compile_dir(os.path.join(_CHECKOUT, "jitdl"), quiet=2)
except OSError:
    pass                # (a read-only checkout: children compile as before)

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the expected texts under tests/golden/ instead of "
                          "comparing with them")
    parser.addoption("--slow", action="store_true",
                     default=os.environ.get("JITDL_TEST_SLOW", "") not in ("", "0"),
                     help="also run the tests marked slow (the dask cluster, the larger half "
                          "of the nvcc battery); JITDL_TEST_SLOW=1 does the same")
    parser.addoption("--target", default=os.environ.get("JITDL_TEST_TARGET", "cpu"),
                     choices=("cpu", "cuda", "emulated"),
                     help="where definitions run: 'cuda' calls every @jd.compute function "
                          "and jd.numpy / jd.nn op on the GPU (NumPy arguments copied there, "
                          "results back), so the tests of definitions and ops check GPU "
                          "kernels against NumPy; needs CuPy and a GPU. 'emulated' does the "
                          "same on the CPU emulator of CUDA C (tests/_cuda_emu.py; g++)")


def pytest_collection_modifyitems(config, items):
    target = config.getoption("--target")
    if target != "cpu":
        cpu = pytest.mark.skip(reason=f"checks the CPU target's own code (its vector math, "
                                      f"fast paths or kernels), which --target {target} "
                                      f"does not run")
        for item in items:
            if "cpu_only" in item.keywords:
                item.add_marker(cpu)
    if config.getoption("--slow") or "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with --slow or JITDL_TEST_SLOW=1 (kept out of "
                                   "the default run to keep it near 10 minutes on 2 cores)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config):
    target = config.getoption("--target")
    if target == "cuda":
        from jitdl.target.cuda import cupy_or_none
        if cupy_or_none() is None:
            raise pytest.UsageError("--target cuda needs CuPy and a GPU it can see")
        from _gpu_target import run_everything_on_gpu
        run_everything_on_gpu()
    elif target == "emulated":
        if shutil.which("g++") is None:
            raise pytest.UsageError("--target emulated needs g++")
        import _cuda_emu
        from _emu_backend import EmulatedDevice
        from _gpu_target import run_everything_on_gpu
        run_everything_on_gpu(EmulatedDevice(_cuda_emu))


def pytest_sessionfinish(session, exitstatus):
    from jitdl.runtime import native
    native.drain()                  # kernels still being linked into the cache
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)


@pytest.fixture
def rng(request):
    """A generator seeded from the test's id: fresh non-trivial data, reproducible."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
