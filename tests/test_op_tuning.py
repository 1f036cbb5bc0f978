"""jd.numpy and jd.nn functions are tunable and inspectable like a @jd.compute function:
f.tune(*args), f.lower(*args), f.schedule_of(*args), f.config_space(*args) and
f.tuning_records(*args) take the op's own arguments and work on the kernel that call runs;
a tuned kernel serves later calls of those shapes here and, by its record, in later
processes (an op with symbolic extents then runs a kernel of fixed shapes for them)."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jitdl as jd
from jitdl import eager

jnp = jd.numpy


@pytest.fixture(scope="module", autouse=True)
def own_records(tmp_path_factory):
    """This module's tuning records in a file of their own, and the op library's state
    forgotten afterwards: later tests in this process see no tuned op (whose new shapes
    would each ask the records first)."""
    before = os.environ.get("JITDL_TUNING_DB")
    os.environ["JITDL_TUNING_DB"] = str(tmp_path_factory.mktemp("op_tuning") / "t.sqlite")
    yield
    if before is None:
        del os.environ["JITDL_TUNING_DB"]
    else:
        os.environ["JITDL_TUNING_DB"] = before
    eager.clear()


@pytest.fixture(scope="module")
def runner():
    r = jd.tune.LocalRunner(n_parallel=2, timeout=20.0, build_timeout=10.0)
    yield r
    r.close()


def _function(name, static=()):
    """The op's Function of fixed shapes (the one tuning takes) with these static
    arguments (an earlier test in this process may have left others of the op)."""
    return next(f for key, f in eager._functions.items()
                if key[0] == name and key[1] == static and not key[3])


def test_inspection_takes_the_ops_own_arguments(rng):
    a = rng.standard_normal((24, 40)).astype(np.float32)
    b = rng.standard_normal((40, 56)).astype(np.float32)
    text = str(jnp.matmul.lower(a, b))
    assert "float32[24, 40]" in text and "float32[40, 56]" in text
    assert len(jnp.matmul.config_space(a, b)) > 1
    assert "matmul" in str(jnp.matmul.schedule_of(a, b))
    # an op of symbolic extents: the kernel of these shapes; keyword arguments are the op's
    text = str(jnp.sum.lower(a, axis=1))
    assert "float32[24, 40]" in text and "float32[24]" in text
    assert "for " in str(jnp.exp.lower(a, after="lower"))
    x = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    assert "float32[2, 4, 9, 9]" in str(jd.nn.conv2d.lower(x, w, padding=1))
    assert jnp.matmul.tuning_records(a, b) == []
    # a call that runs no kernel: NumPy's view, NumPy's own function
    for call in (lambda: jnp.reshape.tune(a, (40, 24)),
                 lambda: jnp.add.lower(a.astype(np.float16), 1)):
        with pytest.raises(TypeError, match="runs no jitdl kernel"):
            call()


def test_calls_after_inspection_take_their_fast_paths_again(rng, monkeypatch):
    """op_call empties the wrappers' tables and slots so that its call reaches the general
    path: later calls fill them again, and then stay off the general path."""
    from jitdl.runtime.kernel import Kernel
    x, y = rng.standard_normal(500), rng.standard_normal(500)
    want = x + y
    np.testing.assert_array_equal(jnp.add(x, y), want)
    jnp.add.lower(x, y)
    jnp.sum.config_space(x)
    np.testing.assert_array_equal(jnp.add(x, y), want)
    assert jnp.sum(x) == pytest.approx(x.sum(), rel=1e-12)
    slow = []
    real = Kernel._call
    monkeypatch.setattr(Kernel, "_call", lambda self, *a, **k: slow.append(self.fname)
                        or real(self, *a, **k))
    np.testing.assert_array_equal(jnp.add(x, y), want)
    assert slow == []


def test_a_tuned_op_serves_later_calls_here_and_in_a_new_process(rng, runner, tmp_path):
    a = rng.standard_normal((48, 64)).astype(np.float32)
    b = rng.standard_normal((64, 96)).astype(np.float32)
    x, y = rng.standard_normal(3000), rng.standard_normal(3000)
    jnp.matmul(a, b)
    result = jnp.matmul.tune(a, b, trials=3, tuner="random", runner=runner, progress=False)
    assert result.measurements
    f = _function("matmul")
    got = jnp.matmul(a, b)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    key = ("matmul", (), (a.shape, a.dtype), (b.shape, b.dtype))
    assert eager._kernels[key] is f.kernel(a, b)        # (the Function's, tuned or not)
    records = [r for r in jnp.matmul.tuning_records(a, b) if r.verified]
    assert records
    jnp.add.tune(x, y, trials=2, tuner="random", runner=runner, progress=False)
    np.testing.assert_array_equal(jnp.add(x, y), x + y)
    np.testing.assert_array_equal(jnp.add(x[1:], y[1:]), x[1:] + y[1:])
    fixed = {k[2][0]: v.dims is None for k, v in eager._kernels.items() if k[0] == "add"}
    assert fixed == {(3000,): True, (2999,): False}
    assert [r for r in jnp.add.tuning_records(x, y) if r.verified]

    # a new process: the records apply to the op's calls (the matmul's best config; the
    # add of the tuned shape runs a kernel of fixed shapes, another size the symbolic one)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    script = textwrap.dedent(f"""
        import json, numpy as np, jitdl as jd
        from jitdl import eager
        a, b, x, y = (np.load(r"{tmp_path}/" + n + ".npy") for n in "abxy")
        np.testing.assert_allclose(jd.numpy.matmul(a, b), a.astype(np.float64) @ b,
                                   rtol=1e-4, atol=1e-4)
        f = next(f for k, f in eager._functions.items() if k[0] == "matmul")
        np.testing.assert_array_equal(jd.numpy.add(x, y), x + y)
        np.testing.assert_array_equal(jd.numpy.add(x[1:], y[1:]), x[1:] + y[1:])
        dims = {{k[2][0][0]: v.dims is None for k, v in eager._kernels.items()
                 if k[0] == "add"}}
        print(json.dumps({{"config": f._configs.get(f._key((a, b))), "fixed": dims}}))
    """)
    env = dict(os.environ, JITDL_NUM_THREADS=os.environ.get("JITDL_NUM_THREADS", "2"))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["config"] == records[0].config
    assert seen["fixed"] == {"3000": True, "2999": False}


def test_a_tuned_shape_keeps_its_kernel_after_a_call_of_another_shape(rng, runner):
    """An op of symbolic extents runs its tuned kernel of fixed shapes for the tuned
    shapes: the direct entry of the symbolic kernel that another shape's call compiles,
    which in the op's slots would serve every later call, hands the tuned shapes back
    (eager._guarded); other shapes keep a direct entry."""
    x, other = rng.standard_normal(2000), rng.standard_normal(1999)
    jd.nn.relu.tune(x, trials=2, tuner="random", runner=runner, progress=False)

    def serves(n):     # (the op's direct slot: the entry of the kernel of shape (n,))
        (slot,) = [k for k in eager._direct if k[0] == "relu"]
        (key,) = [k for k in eager._kernels if k[0] == "relu" and k[2][0] == (n,)]
        return eager._direct[slot] is eager._directs[key]
    for _ in range(2):
        np.testing.assert_array_equal(jd.nn.relu(x), np.maximum(x, 0))
        np.testing.assert_array_equal(jd.nn.relu(other), np.maximum(other, 0))
        assert serves(1999) and eager._direct[("relu", (("fn", "relu"),), 1)] is not None
        np.testing.assert_array_equal(jd.nn.relu(x), np.maximum(x, 0))
        assert serves(2000)
    assert {k[2][0]: v.dims is None for k, v in eager._kernels.items()
            if k[0] == "relu"} == {(2000,): True, (1999,): False}
