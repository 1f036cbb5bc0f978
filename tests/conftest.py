"""Shared fixtures for the jitdl test suite.

The disk cache and the tuning records are pointed at a fresh temporary directory for the
whole session (before jitdl is imported), so tests neither read stale binaries or records
nor litter the user's; child processes find jitdl in this checkout (PYTHONPATH).
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
# child processes import jitdl from this checkout too (not from wherever an editable
# install points, e.g. another worktree)
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_CHECKOUT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the expected texts under tests/golden/ instead of "
                          "comparing with them")
    parser.addoption("--target", default=os.environ.get("JITDL_TEST_TARGET", "cpu"),
                     choices=("cpu", "cuda", "cuda-emulated"),
                     help="where definitions run: 'cuda' calls every @jd.compute function "
                          "and jd.numpy / jd.nn op on the GPU (NumPy arguments copied there, "
                          "results back), so the tests of definitions and ops check GPU "
                          "kernels against NumPy; needs CuPy and a GPU. 'cuda-emulated' does "
                          "the same on the CPU emulator of CUDA C (tests/_cuda_emu.py, g++; "
                          "slow: meant for a few test files at a time)")


def pytest_configure(config):
    if config.getoption("--target") == "cuda":
        from jitdl.target.cuda import cupy_or_none
        if cupy_or_none() is None:
            raise pytest.UsageError("--target cuda needs CuPy and a GPU it can see")
        from _gpu_target import run_everything_on_gpu
        run_everything_on_gpu()
    elif config.getoption("--target") == "cuda-emulated":
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
