"""The CUDA C of the CUDA target, checked without a GPU: golden texts, and nvcc.

  - golden: the CUDA C of a handful of kernels (automatic schedules for a fixed sm_90
    target, `jitdl.target.cuda.CUDA()`, and one hand-written GPU schedule), compared
    exactly with tests/golden/*.cu. After an intended change:

        pytest tests/test_cuda_codegen.py --update-golden

    then review git diff. Each golden file must also compile with nvcc.
  - the nvcc battery: the generated kernels of many definitions (those of
    tests/test_definitions.py, every jd.numpy and jd.nn op family inside @jd.compute,
    several dtypes, dynamic sizes, broadcasting, keepdims, casts...) compiled with
    `nvcc -cubin -arch=sm_90`, warnings as errors, so a syntax or type error in generated
    code fails CI. Many modules go into one translation unit (each in its own namespace,
    its kernels renamed, a #line directive naming it), two nvcc processes at a time; a
    failure names the definition, shows the offending source lines and nvcc's message.
    Every case must also be scheduled at the automatic GPU schedule's first level (a
    fallback hides a bug). Without nvcc the kernels are still generated and the golden
    texts compared; the compiling skips.

Whether the kernels compute the right values is checked elsewhere: their loop IR on the
CPU (tests/test_cuda_schedule.py), on a GPU when one is there.
"""
import dataclasses
import itertools
import inspect
import logging
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

import jitdl as jd
import jitdl.numpy as jnp
from jitdl import nn, pipeline
from jitdl.api import Function
from jitdl.errors import JitdlError
from jitdl.target.cuda import CUDA
from test_golden import GOLDEN, check_golden

GPU = CUDA()                    # the sm_90 default: the same text on every machine
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(
    NVCC is None, reason="nvcc is not on PATH: the generated CUDA C is not compiled "
                         "(install the CUDA toolkit to run these checks)")
NVCC_FLAGS = ["-cubin", f"-arch={GPU.sm}", "-Werror", "all-warnings",
              "-Xcudafe", "--display_error_number"]
F32, F64, I32, I64, BOOL = (np.dtype(t) for t in ("float32", "float64", "int32", "int64",
                                                   "bool"))
rng = np.random.default_rng(1212)


def cuda_module(f, args, kwargs=None, target=GPU, schedule=None):
    """(CUDA C, Lowered) of f(*args, **kwargs) for `target`: its automatic schedule, or
    the schedule function `schedule`."""
    args = f._args(tuple(args), kwargs or {})
    specs = f._specs(args)
    graph = f._trace(specs, args)
    if schedule is not None:
        low = pipeline.lower(graph, target, f._options(), schedule_fn=schedule)
    else:
        low = f._lower(specs, graph=graph, target=target)
    return pipeline.build(low, target).texts["cuda"], low


def data(shape, dtype=F32):
    """Random arrays of the intended shape and dtype (the values do not matter to code
    generation, but a kernel is never compiled for all-zero data by habit)."""
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(1, 9, shape).astype(dtype)
    return rng.uniform(0.5, 1.5, shape).astype(dtype)


# ---------------------------------------------------------------------------------------
# Golden CUDA C
# ---------------------------------------------------------------------------------------

@jd.compute
def matmul(A, B):
    (M, K), (_, N) = A.shape, B.shape
    k = jd.reduce_axis(K, name="k")
    return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")


@jd.compute
def softmax(X):
    n, m = X.shape
    mx[i] = max(X[i, k] for k in range(m))
    e[i, j] = exp(X[i, j] - mx[i])
    s[i] = sum(e[i, k] for k in range(m))
    Y[i, j] = e[i, j] / s[i]
    return Y


@jd.compute
def conv2d(X, W, b):
    return nn.relu(nn.conv2d(X, W, b, padding=1))


@jd.compute(dynamic=True)
def elementwise(A, B):
    return jnp.sqrt(jnp.abs(A)) * B + 1


@jd.compute
def rowsum(X):
    n, m = X.shape
    k = jd.reduce_axis(m, name="k")
    return jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k), name="S")


def bind_shared_schedule(s, cfg):
    """One block per row, 32 threads splitting the row, the row copied to shared memory
    by the whole block, the partial sums combined across threads."""
    S = s["S"]
    (i,) = S.axis
    (k,) = S.reduce_axis
    ko, ki = s.split(k, 32)
    s.reorder(i, ki, ko)
    s.bind(i, "blockIdx.x")
    s.bind(ki, "threadIdx.x")
    c = s.cache_read("X", [S], "shared")
    s.compute_at(c, S, i)


def tiled_schedule(s, cfg):
    """A 2-D grid of 8x32 blocks over C, A's and B's tiles staged in shared memory per
    step of k."""
    C = s["C"]
    i, j = C.axis
    (k,) = C.reduce_axis
    bi, ti = s.split(i, 8)
    bj, tj = s.split(j, 32)
    ko, ki = s.split(k, 16)
    s.reorder(bi, bj, ti, tj, ko, ki)
    s.bind(bi, "blockIdx.y")
    s.bind(bj, "blockIdx.x")
    s.bind(ti, "threadIdx.y")
    s.bind(tj, "threadIdx.x")
    for name in ("A", "B"):
        c = s.cache_read(name, [C], "shared")
        s.compute_at(c, C, ko)


def two_level_schedule(s, cfg):
    """The classic hand-written GPU matmul: a 32x32 block of C per 8x8 threads, 4x4 per
    thread; A's and B's tiles in shared memory per step of k, and from there in each
    thread's registers per k.i."""
    C = s["C"]
    i, j = C.axis
    (k,) = C.reduce_axis
    bi, i1 = s.split(i, 32)
    ti, ii = s.split(i1, 4)
    bj, j1 = s.split(j, 32)
    tj, jj = s.split(j1, 4)
    ko, ki = s.split(k, 8)
    s.reorder(bi, bj, ti, tj, ko, ki, ii, jj)
    s.bind(bi, "blockIdx.y")
    s.bind(bj, "blockIdx.x")
    s.bind(ti, "threadIdx.y")
    s.bind(tj, "threadIdx.x")
    for name in ("A", "B"):
        shared = s.cache_read(name, [C], "shared")
        s.compute_at(shared, C, ko)
        s.compute_at(s.cache_read(shared, [C], "local"), C, ki)


def tvm_tutorial_schedule(s, cfg):
    """The matmul schedule of TVM's GPU tutorials, ported: C's local cache computed at
    each thread's tile (tx), the operands' shared copies at its k.o and their register
    copies at its k.i (compute_at inside a stage itself computed at a loop); a 32x32
    block per 8x8 threads. TVM's binds of the shared copies' split loops (cooperative
    fetching) are what jitdl does to every shared copy: their splits stay, unbound."""
    C = s["C"]
    CL = s.cache_write(C)
    AA, BB = (s.cache_read(t, [CL], "shared") for t in "AB")
    AL, BL = (s.cache_read(t, [CL], "local") for t in (AA, BB))
    by, yi = s.split(C.axis[0], 32)
    bx, xi = s.split(C.axis[1], 32)
    s.reorder(by, bx, yi, xi)
    ty, yi = s.split(yi, nparts=8)
    tx, xi = s.split(xi, nparts=8)
    s.reorder(ty, tx, yi, xi)
    for ax, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"),
                    (tx, "threadIdx.x")):
        s.bind(ax, tag)
    s.compute_at(CL, C, tx)
    yo, xo = CL.axis
    ko, ki = s.split(CL.reduce_axis[0], 8)
    s.reorder(ko, ki, yo, xo)
    for shared, local in ((AA, AL), (BB, BL)):
        s.compute_at(shared, CL, ko)
        s.compute_at(local, CL, ki)
        rows, cols = shared.axis
        _, r = s.split(rows, nparts=8)
        _, c = s.split(cols, nparts=8)


def vectorized_schedule(s, cfg):
    """A block per row, each thread four consecutive elements of it as one vectorized
    loop: float4 loads and stores where the addresses are aligned."""
    i, j = s["Y"].axis
    t, v = s.split(j, 4)
    s.bind(i, "blockIdx.x")
    s.bind(t, "threadIdx.x")
    s.vectorize(v)


@jd.compute
def fma_relu(A, B, C):
    return jd.tensor(A.shape, lambda i, j: jd.max(A[i, j] * B[j] + C[i, j], 0.0), name="Y")


GOLDEN_CASES = {
    "cuda_matmul_auto": lambda: cuda_module(matmul, (data((64, 40)), data((40, 96)))),
    "cuda_softmax_auto": lambda: cuda_module(softmax, (data((64, 300)),)),
    "cuda_conv2d_nn": lambda: cuda_module(conv2d, (data((1, 3, 12, 10)),
                                                   data((4, 3, 3, 3)), data(4))),
    "cuda_elementwise_dynamic": lambda: cuda_module(elementwise, (data(1000), data(1000))),
    "cuda_rowsum_auto": lambda: cuda_module(rowsum, (data((33, 700)),)),
    "cuda_rowsum_bind_shared": lambda: cuda_module(rowsum, (data((9, 100)),),
                                                   schedule=bind_shared_schedule),
    "cuda_matmul_tiled_by_hand": lambda: cuda_module(matmul, (data((64, 48)), data((48, 96))),
                                                     schedule=tiled_schedule),
    "cuda_matmul_two_level": lambda: cuda_module(matmul, (data((64, 48)), data((48, 96))),
                                                 schedule=two_level_schedule),
    "cuda_matmul_tvm_tutorial": lambda: cuda_module(matmul, (data((64, 48)), data((48, 96))),
                                                    schedule=tvm_tutorial_schedule),
    "cuda_fma_relu_vectorized": lambda: cuda_module(
        fma_relu, (data((16, 128)), data(128), data((16, 128))), schedule=vectorized_schedule),
}


@pytest.mark.parametrize("name", list(GOLDEN_CASES))
def test_golden_cuda_source(request, name):
    src, _ = GOLDEN_CASES[name]()
    check_golden(request, name, src, suffix=".cu", test="tests/test_cuda_codegen.py",
                 what="CUDA C")


def test_golden_cases_are_what_they_claim():
    """The golden kernels show what they are meant to: tiles in shared memory, a block
    per row with shuffles, dynamic sizes as parameters, the hand-written binding."""
    text = {n: (GOLDEN / f"{n}.cu").read_text() for n in GOLDEN_CASES}
    assert "__shared__" in text["cuda_matmul_auto"] and "C_acc[64]" in text["cuda_matmul_auto"]
    assert "__shfl_down_sync" in text["cuda_softmax_auto"]
    assert "__shfl_down_sync" in text["cuda_rowsum_auto"]
    assert "const long long A_n0" in text["cuda_elementwise_dynamic"]
    hand = text["cuda_rowsum_bind_shared"]
    assert "__shared__ __align__(16) float X_cache_l[100];" in hand
    assert "__launch_bounds__(32)" in hand
    tiled = text["cuda_matmul_tiled_by_hand"]
    assert "__launch_bounds__(256)" in tiled and tiled.count("__syncthreads();") >= 2
    assert "blockIdx.y" in tiled and "threadIdx.y" in tiled
    two = text["cuda_matmul_two_level"].split("__global__")[1]
    assert "__shared__ __align__(16) float A_cache_l[" in two
    assert "float A_cache_cache_l[4];" in two and "float C_acc[16];" in two
    tut = text["cuda_matmul_tvm_tutorial"].split("__global__")[1]
    assert "__shared__ __align__(16) float A_cache_l[256];" in tut     # 32 rows x 8 of k
    assert "float A_cache_cache_l[4];" in tut and "float C_local_l[16];" in tut
    vec = text["cuda_fma_relu_vectorized"]
    assert vec.count("jd_vload<uint4>") == 3 and "jd_vstore<uint4>(Y, " in vec  # A, B, C
    assert "} else {" in vec           # the serial loop, for addresses not aligned
    # constant shapes: 32-bit indices; dynamic sizes keep 64-bit ones
    assert "long long" not in text["cuda_matmul_auto"].split("__global__")[1]
    assert "for (long long" in text["cuda_elementwise_dynamic"]


def test_the_automatic_schedules_check_is_not_run_again(monkeypatch):
    """The automatic cuda schedule checks a level by its passes and its CUDA C; lower()
    and build() take those results instead of running them a second time (35-40% of a
    cold cuda_source), and the source is the one they gave before (the golden files)."""
    calls = {"generate": 0, "simplify": 0, "partition_loops": 0}
    real = {"generate": pipeline.cuda_codegen.generate, "simplify": pipeline.simplify,
            "partition_loops": pipeline.partition_loops}

    def counted(name):
        def call(*args, **kwargs):
            calls[name] += 1
            return real[name](*args, **kwargs)
        return call
    monkeypatch.setattr(pipeline.cuda_codegen, "generate", counted("generate"))
    monkeypatch.setattr(pipeline, "partition_loops", counted("partition_loops"))
    monkeypatch.setitem(pipeline._TIR, "simplify", counted("simplify"))
    monkeypatch.setitem(pipeline._TIR, "simplify_tails", counted("simplify"))
    src, low = cuda_module(matmul, (data((64, 40)), data((40, 96))))
    assert calls == {"generate": 1, "simplify": 2, "partition_loops": 1}
    assert src.rstrip("\n") + "\n" == (GOLDEN / "cuda_matmul_auto.cu").read_text()
    assert low.auto_level is not None and low.cuda_module[0] is low.func
    # a lowering stopped early, or given other steps, runs what it needs itself
    calls.update(generate=0, simplify=0, partition_loops=0)
    part = pipeline.lower(low.graph, GPU, matmul._options(), until="partition_loops")
    assert "simplify_tails" not in part.times and calls["generate"] == 1
    again = pipeline.build(pipeline.lower(low.graph, GPU, matmul._options(),
                                          steps=low.schedule.steps), GPU)
    assert calls["generate"] == 2 and again.texts["cuda"] == src


def test_tiles_of_the_next_step_are_loaded_while_this_one_computes():
    """Where the tiles divide the shapes, the block's copies of step k + 1 are read into
    registers after the barrier of step k (their loads overlap its arithmetic) and stored
    to shared memory at the top of step k + 1; the first step's before the loop."""
    src, _ = cuda_module(matmul, (data((128, 128)), data((128, 128))))   # BK 16: 8 steps
    body = src.split("__global__")[1]
    loop = body.index("for (int k_o = 0; k_o < 8; ++k_o)")
    assert "jd_pf0[0] = A[" in body[:loop] and "jd_pf1[0] = B[" in body[:loop]
    step = body[loop:]
    assert step.index("A_cache_l[") < step.index("if (k_o + 1 < 8)") < \
        step.index("jd_pf0[0] = A[")
    assert "= jd_pf0[0];" in step and "((k_o + 1) * 16)" in step
    # tiles that do not divide the shapes: each copy comes as a full part and a guarded
    # rest, every part spread over the whole block (a flat loop or registers), none left
    # to the few threads of an outer loop
    src, _ = cuda_module(matmul, (data((300, 64)), data((64, 200))))
    body = src.split("__global__")[1]
    assert body.count("float jd_pf") == 4 and "for (int d" not in body.split("k_o")[0]
    assert re.search(r"if \(\(\(?\(?d\w+ \+ \(j_o \* 128\)\)? < 200\)", body)
    # ... and the threads accumulate their whole 8 x 8 block (the partial tile's extra
    # rows and columns read unfilled elements of the shared copies, never stored): no
    # guard inside the unrolled inner loop, only around the stores of C
    ir = str(matmul.lower(data((300, 64)), data((64, 200)), target="cuda")).splitlines()
    k = next(n for n, line in enumerate(ir) if "unrolled k_i" in line)
    update = next(n for n, line in enumerate(ir) if " + A_cache_l[" in line)
    assert not any(line.strip().startswith("if ") for line in ir[k:update])
    assert any("< 300" in line for line in ir[update:]) and \
        any("< 200" in line for line in ir[update:])


@needs_nvcc
def test_golden_files_compile_with_nvcc():
    compile_or_fail({f"golden/{n}.cu": (GOLDEN / f"{n}.cu").read_text() for n in GOLDEN_CASES})


@needs_nvcc
def test_vectorized_loops_are_vector_instructions():
    """The aligned path of a vectorized loop is 128-bit loads and stores in PTX (float4:
    ld.global.nc.v4, st.global.v4), the other path scalar ones."""
    src, _ = GOLDEN_CASES["cuda_fma_relu_vectorized"]()
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "vec.cu"
        p.write_text(src)
        r = subprocess.run([NVCC, "-ptx", f"-arch={GPU.sm}", "-o", str(p.with_suffix(".ptx")),
                            str(p)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        ptx = p.with_suffix(".ptx").read_text()
    assert len(re.findall(r"ld\.global\.nc\.v4\.u32", ptx)) == 3, ptx     # A, B, C
    assert len(re.findall(r"st\.global\.v4\.\w32", ptx)) == 1, ptx
    assert "ld.global.nc.f32" in ptx


@needs_nvcc
def test_repeated_subexpressions_compile():
    """A statement whose repeated nodes are computed once (locals, an immediately invoked
    lambda for a guarded arm: CUDA C++ that nvcc must take as it is)."""
    from test_robust import guarded_gather      # (8 steps of z * z * 0.5 + z * 0.25)
    x = np.linspace(-0.5, 0.5, 16)

    def chain(z):       # (integer abs and saturating casts write their operand 3 times)
        for _ in range(6):
            z = jd.int8(jd.float32(jd.abs(z)) * 1.5) - jd.int8(3)
        return z
    f = jd.compute(lambda A: jd.tensor(A.shape, lambda i: chain(A[i]), name="Y"))
    compile_or_fail({"guarded_growth": guarded_gather.cuda_source(
        x, np.array([0, 3, 99, 5, -7, 15, 1000000, 2])),
        "abs_cast_chain": f.cuda_source(np.arange(-8, 8, dtype=np.int8))})


@needs_nvcc
def test_division_by_a_literal_zero_compiles():
    """x / 0.0 (a covariance's / (n - 1) of one row, folded to a constant): nvcc's front
    end rejected the literal zero divisor (error #39-D, warnings as errors)."""
    f = jd.compute(lambda X: X / (X.shape[0] - 1))
    g = jd.compute(lambda X: X / -0.0)
    compile_or_fail({"f32": f.cuda_source(data((1, 5))),
                     "f64": f.cuda_source(data((1, 5), F64)),
                     "negative": g.cuda_source(data(7))})


@needs_nvcc
def test_unsigned_comparisons_with_zero_and_powers_compile():
    """uint8 x >= 0, x < 0 (np.signbit) and x ** y: nvcc's front end rejected the
    comparison of an unsigned value with zero (#186-D, warnings as errors), written by
    the comparison or by jd_ipow's test of a negative exponent."""
    u = data((4, 9), np.uint8)
    compile_or_fail({
        "ge0": jd.compute(lambda X: X >= 0).cuda_source(u),
        "where": jd.compute(lambda X: jnp.where(X < 0, X, X + 1)).cuda_source(u),
        "signbit": jd.compute(lambda X: jnp.signbit(X)).cuda_source(u),
        "power": jd.compute(lambda X, Y: X ** Y).cuda_source(u, u),
    })


@needs_nvcc
def test_cuda_source_of_the_issue_definitions_compiles():
    """What the issue checks: f.cuda_source(...) (the public API, the default target of a
    machine without a GPU) of matmul, softmax, conv2d and an elementwise definition."""
    a = data((256, 128))
    compile_or_fail({
        "matmul": matmul.cuda_source(a, data((128, 192))),
        "softmax": softmax.cuda_source(data((1000, 1000))),
        "conv2d": conv2d.cuda_source(data((2, 16, 32, 32)), data((32, 16, 3, 3)), data(32)),
        "elementwise": elementwise.cuda_source(data((300, 77)), data(77)),
    })


@needs_nvcc
def test_ptxas_report_of_the_matmul_kernel(capsys):
    """Registers, spills and shared memory of the automatic matmul kernel (a report, not
    a limit): shown with pytest -s."""
    src = matmul.cuda_source(data((1024, 1024)), data((1024, 1024)))
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "matmul.cu"
        p.write_text(src)
        r = subprocess.run([NVCC, *NVCC_FLAGS, "-Xptxas", "-v", "-o", str(p.with_suffix(".cubin")),
                            str(p)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    info = [ln for ln in (r.stdout + r.stderr).splitlines() if "registers" in ln or "spill" in ln]
    assert info, r.stderr
    with capsys.disabled():
        print("\nptxas -v, automatic matmul 1024^3 (sm_90):\n  " + "\n  ".join(info))


# ---------------------------------------------------------------------------------------
# nvcc: many modules per translation unit
# ---------------------------------------------------------------------------------------

_KERNEL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(')
_MESSAGE = re.compile(r"^(?P<file>[^\s()]+)\((?P<line>\d+)\): (?P<kind>error|warning)")
_MODULE = re.compile(r"jd_m(\d+)_")


def _unit(names, modules):
    """One translation unit of modules: each in its own namespace (the helpers of the
    prelude are defined once per module), its kernels renamed jd_m<k>_<name> (extern "C"
    names share one namespace), a #line directive naming the module for messages."""
    parts = []
    for k, name in enumerate(names):
        src = modules[name]
        for kernel in set(_KERNEL.findall(src)):
            src = re.sub(rf"\b{kernel}\b", f"jd_m{k}_{kernel}", src)
        parts.append(f'namespace jd_m{k} {{\n#line 1 "{name}"\n{src}\n}}\n')
    return "".join(parts)


def _start(names, modules, workdir, tag):
    src = Path(workdir) / f"unit{tag}.cu"
    src.write_text(_unit(names, modules))
    return subprocess.Popen([NVCC, *NVCC_FLAGS, "-o", str(src.with_suffix(".cubin")),
                             str(src)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _blame(names, output):
    """nvcc's output split by module: {name: [message lines]}; lines that name no module
    under None."""
    out, current = {}, None
    for line in output.splitlines():
        m = _MESSAGE.match(line)
        if m and m["file"] in names:
            current = m["file"]
        elif (m := _MODULE.search(line)) and int(m[1]) < len(names):
            current = names[int(m[1])]      # ptxas names the (renamed) kernel
        elif not line.startswith((" ", "Remark")) and line.strip():
            current = None if "detected in the compilation" in line else current
        if line.strip():
            out.setdefault(current, []).append(line)
    return out


def nvcc_compile(modules, jobs=2):
    """Compile every module (name -> CUDA C) with nvcc; {name: nvcc's messages} for those
    that fail. The modules go into `jobs` translation units compiled at once; a unit that
    fails is compiled again without the modules its messages blame (each of those alone,
    to confirm), until what is left compiles (halved when the messages blame none)."""
    failed = {}
    queue = [list(modules)[k::jobs] for k in range(jobs)]
    queue = [u for u in queue if u]
    with tempfile.TemporaryDirectory(prefix="jitdl-nvcc-") as d:
        started = 0
        while queue:
            procs = []
            for names in queue[:jobs]:
                started += 1
                procs.append((names, _start(names, modules, d, started)))
            queue = queue[jobs:]
            for names, p in procs:
                output, _ = p.communicate(timeout=600)
                if p.returncode == 0:
                    continue
                blamed = _blame(names, output)
                blamed.pop(None, None)          # (lines that name no module)
                if len(names) == 1:
                    failed[names[0]] = "\n".join(blamed.get(names[0], [])) or output
                elif blamed:
                    # alone again: a syntax error can spill into the modules after it
                    queue += [[n] for n in blamed]
                    rest = [n for n in names if n not in blamed]
                    queue += [rest] if rest else []
                else:
                    queue += [names[:len(names) // 2], names[len(names) // 2:]]
    return failed


def report(failed, modules, limit=8):
    """The failures as text: per module, nvcc's messages and the source lines they name."""
    parts = []
    for name in list(failed)[:limit]:
        src = modules[name].splitlines()
        lines = sorted({int(m["line"]) for ln in failed[name].splitlines()
                        if (m := _MESSAGE.match(ln))})
        shown = []
        for ln in lines[:4]:
            for k in range(max(ln - 3, 1), min(ln + 1, len(src)) + 1):
                shown.append(f"{'>' if k == ln else ' '}{k:5d}| {src[k - 1]}")
            shown.append("  ...")
        parts.append(f"=== {name}\n{failed[name][:3000]}\n--- source:\n" + "\n".join(shown))
    more = f"\n(and {len(failed) - limit} more: {', '.join(list(failed)[limit:])})" \
        if len(failed) > limit else ""
    return "\n\n".join(parts) + more


def test_nvcc_failures_name_their_module():
    """The battery's harness: among modules that compile, a syntax error, a type error
    and a kernel over the shared memory limit (an error of ptxas, after the front end) are
    each blamed on their own module, with nvcc's message and the source line."""
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    good, _ = cuda_module(rowsum, (data((9, 100)),), schedule=bind_shared_schedule)
    decl = "__shared__ __align__(16) float X_cache_l[100];"
    bad = {
        "syntax": good.replace(decl, decl[:-1]),
        "type": good.replace("const float* __restrict__ X", "const float2* __restrict__ X"),
        "shared": good.replace(decl, "__shared__ __align__(16) float X_cache_l[100 * 200];"),
    }
    assert all(v != good for v in bad.values())
    modules = {"ok0": good, **bad, "ok1": good}
    failed = nvcc_compile(modules)
    assert set(failed) == set(bad), failed
    assert "error" in failed["syntax"] and "too much shared data" in failed["shared"]
    text = report(failed, modules)
    assert "=== type" in text and ">" in text and "float2" in text


def compile_or_fail(modules):
    failed = nvcc_compile(modules)
    if failed:
        pytest.fail(f"nvcc rejected the CUDA C of {len(failed)} of {len(modules)} modules: "
                    f"{', '.join(failed)}\n\n{report(failed, modules)}", pytrace=False)


# ---------------------------------------------------------------------------------------
# The battery: which kernels
# ---------------------------------------------------------------------------------------

@dataclasses.dataclass
class Case:
    name: str
    f: Function
    args: tuple
    kwargs: dict = dataclasses.field(default_factory=dict)
    target: CUDA = GPU
    slow: bool = False          # in the part of the battery marked slow


def define(name, fn, nargs, dynamic=False):
    """A @jd.compute definition named `name` whose body is fn(X[, Y[, Z[, W]]])."""
    if nargs == 1:
        def d(X):
            return fn(X)
    elif nargs == 2:
        def d(X, Y):
            return fn(X, Y)
    elif nargs == 3:
        def d(X, Y, Z):
            return fn(X, Y, Z)
    else:
        def d(X, Y, Z, W):
            return fn(X, Y, Z, W)
    d.__name__ = d.__qualname__ = name
    return jd.compute(dynamic=dynamic)(d)


def case(name, fn, *args, dynamic=False, target=GPU, slow=False):
    return Case(name, define(name, fn, len(args), dynamic), args, target=target, slow=slow)


class _Captured(Exception):
    pass


def test_definitions_cases():
    """The calls tests/test_definitions.py makes, collected by running its test functions
    (every parametrisation, the rng fixture seeded) with the calls of definitions and the
    comparisons replaced by recording the arguments: each (definition, argument types)
    once."""
    import test_definitions as td
    calls = []

    def fake_check(f, args, expected, *a, **k):
        calls.append((f, tuple(args), {}))
        return np.asarray(expected)

    def fake_call(self, *args, out=None, **kwargs):
        calls.append((self, args, kwargs))
        raise _Captured
    saved = Function.__call__, td.check, td.assert_matches
    Function.__call__ = fake_call
    td.check, td.assert_matches = fake_check, lambda *a, **k: None
    try:
        for name, fn in vars(td).items():
            if not name.startswith("test_") or not callable(fn):
                continue
            axes = []
            for m in getattr(fn, "pytestmark", []):
                if m.name != "parametrize":
                    continue
                names = m.args[0].split(",") if isinstance(m.args[0], str) else m.args[0]
                names = [n.strip() for n in names]
                values = [v.values if hasattr(v, "values") else v for v in m.args[1]]
                if len(names) == 1:
                    values = [v[0] if hasattr(m.args[1][k], "values") else v
                              for k, v in enumerate(values)]
                    axes.append([{names[0]: v} for v in values])
                else:
                    axes.append([dict(zip(names, v)) for v in values])
            wants_rng = "rng" in inspect.signature(fn).parameters
            for combo in itertools.product(*axes):
                kwargs = {k: v for part in combo for k, v in part.items()}
                if wants_rng:
                    kwargs["rng"] = np.random.default_rng(len(calls))
                try:
                    fn(**kwargs)
                except _Captured:
                    pass
    finally:
        Function.__call__, td.check, td.assert_matches = saved
    cases, seen = [], set()
    for f, args, kwargs in calls:
        key = (f.name, repr(f._specs(f._args(tuple(args), kwargs))))
        if key not in seen:
            seen.add(key)
            cases.append(Case(f"{f.name}_{len(cases)}", f, args, kwargs))
    return cases


test_definitions_cases.__test__ = False     # (a builder, not a test)

UNARY_DTYPES = [F32, F64, I32, I64, BOOL]
NARROW = [np.dtype(t) for t in ("int8", "uint8", "int16")]


def ufunc_cases():
    from jitdl.numpy import _ufuncs
    out = []
    unary = sorted(_ufuncs._UNARY_DOCS) + ["abs", "sinc", "radians", "degrees"]
    for name in unary:
        fn = getattr(jnp, name)
        for dt in UNARY_DTYPES + (NARROW if name in ("negative", "absolute", "sign", "invert",
                                                     "square", "exp", "reciprocal") else []):
            out.append(case(f"{name}_{dt}", fn, data((5, 37), dt), slow=dt in (F64, I64)))
    binary = sorted(_ufuncs._BINARY_DOCS) + ["power", "true_divide", "mod"]
    for name in binary:
        fn = getattr(jnp, name)
        for dt in UNARY_DTYPES:
            out.append(case(f"{name}_{dt}", fn, data((6, 33), dt), data((6, 33), dt),
                            slow=dt in (F64, I64)))
        # broadcasting, mixed dtypes, a Python scalar on either side
        out.append(case(f"{name}_bcast", fn, data((4, 1, 6)), data((5, 1), F64)))
        out.append(case(f"{name}_i32_f32", fn, data((7, 9), I32), data(9, F32)))
        out.append(case(f"{name}_i8_i64", fn, data((3, 20), "int8"), data((3, 1), I64)))
        out.append(case(f"{name}_scalar_r", lambda X, fn=fn: fn(X, 3), data((8, 8), I32)))
        out.append(case(f"{name}_scalar_l", lambda X, fn=fn: fn(2.5, X), data((8, 8), F32)))
    more = {
        "clip": lambda X: jnp.clip(X, 0.7, 1.2),
        "clip_int": lambda X: jnp.clip(X, 2, 5),
        "round2": lambda X: jnp.round(X, 2),
        "around_neg": lambda X: jnp.around(X, -1),
        "nan_to_num": lambda X: jnp.nan_to_num(X, nan=1.0, posinf=2.0),
        "where3": lambda X: jnp.where(X > 1, X, -X),
        "where_int": lambda X: jnp.where(X > 3, X, 0),
        "isclose_like": lambda X: jnp.abs(X - 1) <= 1e-3 + 1e-5 * jnp.abs(X),
    }
    for name, fn in more.items():
        for dt in (F32, F64, I32, I64):
            out.append(case(f"{name}_{dt}", fn, data((9, 10), dt), slow=dt in (F64, I64)))
    intrinsics = {
        "erf": jd.erf, "rsqrt": jd.rsqrt, "sigmoid": jd.sigmoid, "round": jd.round,
        "trunc": jd.trunc, "expm1": jd.expm1, "log1p": jd.log1p, "atan": jd.atan,
        "sign": jd.sign, "isinf": jd.isinf, "isfinite": jd.isfinite, "tan": jd.tan,
        "atan2": lambda X: jd.atan2(X, X + 1), "fmod": lambda X: jd.fmod(X, 0.3),
        "pow": lambda X: jd.pow(X, 2.5), "select": lambda X: jd.select(X > 1, X, 0.5),
        "jd_where": lambda X: jd.where(X < 1, X * 2, X), "jd_max": lambda X: jd.max(X, 1),
    }
    for name, fn in intrinsics.items():
        for dt in (F32, F64):
            out.append(case(f"jd_{name}_{dt}", lambda X, fn=fn: fn(X), data((4, 50), dt),
                            slow=dt == F64))
    return out


REDUCTIONS = ["sum", "prod", "mean", "var", "std", "max", "min", "argmax", "argmin", "all",
              "any", "amax", "amin", "ptp", "count_nonzero", "nansum", "nanmax", "nanmin",
              "nanmean", "average"]


def reduction_cases():
    out = []
    for name in REDUCTIONS:
        fn = getattr(jnp, name)
        for dt in UNARY_DTYPES:
            for keep in (False, True):
                out.append(case(f"{name}_{dt}_ax1_k{int(keep)}",
                                lambda X, fn=fn, keep=keep: fn(X, axis=1, keepdims=keep),
                                data((6, 50), dt), slow=dt != F32 and keep))
        for dt in (F32, I32):
            out.append(case(f"{name}_{dt}_all", lambda X, fn=fn: fn(X), data((6, 50), dt),
                            slow=dt == I32))
            out.append(case(f"{name}_{dt}_ax0", lambda X, fn=fn: fn(X, axis=0),
                            data((300, 7), dt), slow=dt == I32))
        if name not in ("argmax", "argmin"):
            out.append(case(f"{name}_3d_ax02_k1",
                            lambda X, fn=fn: fn(X, axis=(0, 2), keepdims=True),
                            data((3, 4, 70), F64), slow=True))
        out.append(case(f"{name}_long_row", lambda X, fn=fn: fn(X, axis=-1),
                        data((5, 3000), F32)))
    out += [
        case("sum_dtype_f64", lambda X: jnp.sum(X, axis=1, dtype=np.float64), data((6, 40))),
        case("var_ddof1", lambda X: jnp.var(X, axis=0, ddof=1), data((40, 6))),
        case("max_initial", lambda X: jnp.max(X, axis=1, initial=0.5), data((6, 40))),
        case("sum_where", lambda X: jnp.sum(X, axis=1, where=X > 1), data((6, 40))),
        case("average_weights", lambda X, Y: jnp.average(X, axis=1, weights=Y),
             data((6, 40)), data(40)),
        case("mean_of_bools", lambda X: jnp.mean(X, axis=1), data((6, 40), BOOL)),
    ]
    return out


def shape_cases():
    x, x3 = data((6, 10)), data((3, 4, 5))
    idx = rng.integers(0, 6, 9).astype(np.int64)
    out = []
    ops = {
        "transpose": (lambda X: jnp.transpose(X), x),
        "transpose3": (lambda X: jnp.transpose(X, (1, 0, 2)), x3),
        "swapaxes": (lambda X: jnp.swapaxes(X, 0, 2), x3),
        "moveaxis": (lambda X: jnp.moveaxis(X, 0, -1), x3),
        "reshape": (lambda X: jnp.reshape(X, (-1,)), x3),
        "reshape2": (lambda X: jnp.reshape(X, (4, 15)) * 2, x),
        "ravel_t": (lambda X: jnp.ravel(jnp.transpose(X)), x),
        "squeeze": (lambda X: jnp.squeeze(X), data((1, 7, 1))),
        "expand_dims": (lambda X: jnp.expand_dims(X, 1) + 1, x),
        "broadcast_to": (lambda X: jnp.broadcast_to(X, (4, 10)), data(10)),
        "flip": (lambda X: jnp.flip(X, 0), x),
        "flip_all": (lambda X: jnp.flip(X), x3),
        "fliplr": (lambda X: jnp.fliplr(X), x),
        "flipud": (lambda X: jnp.flipud(X), x),
        "copy": (lambda X: jnp.copy(X), x),
        "roll": (lambda X: jnp.roll(X, 3, axis=1), x),
        "roll_flat": (lambda X: jnp.roll(X, -4), x),
        "repeat": (lambda X: jnp.repeat(X, 2, axis=1), x),
        "repeat_flat": (lambda X: jnp.repeat(X, 3), x),
        "tile": (lambda X: jnp.tile(X, (2, 3)), x),
        "split0": (lambda X: jnp.split(X, 2, axis=0)[1], x),
        "array_split": (lambda X: jnp.array_split(X, 3, axis=1)[2], x),
        "take0": (lambda X, I: jnp.take(X, I, axis=0), x, idx),
        "take_clip": (lambda X, I: jnp.take(X, I * 3, axis=1, mode="clip"), x, idx),
        "take_wrap": (lambda X, I: jnp.take(X, I - 7, mode="wrap"), x, idx),
        "take_flat": (lambda X, I: jnp.take(X, I), x, idx),
        "concatenate0": (lambda X, Y: jnp.concatenate([X, Y], axis=0), x, data((3, 10))),
        "concatenate1": (lambda X, Y: jnp.concatenate([X, Y, X], axis=1), x, data((6, 2))),
        "concat_flat": (lambda X, Y: jnp.concatenate([X, Y], axis=None), x, data(5)),
        "stack": (lambda X, Y: jnp.stack([X, Y], axis=1), x, x + 1),
        "hstack": (lambda X, Y: jnp.hstack([X, Y]), x, x),
        "vstack": (lambda X, Y: jnp.vstack([X, Y]), data(10), x),
        "where": (lambda C, X, Y: jnp.where(C, X, Y), data((6, 10), BOOL), x, data(10)),
        "astype": (lambda X: jnp.astype(X, np.int32), x),
    }
    for mode in ("constant", "edge", "reflect", "symmetric", "wrap"):
        ops[f"pad_{mode}"] = (lambda X, mode=mode: jnp.pad(X, ((1, 2), (3, 0)), mode=mode), x)
    ops["pad_const_value"] = (lambda X: jnp.pad(X, 2, constant_values=-1.5), x)
    linalg = {
        "matmul": (lambda A, B: jnp.matmul(A, B), data((33, 20)), data((20, 65))),
        "matmul_big": (lambda A, B: jnp.matmul(A, B), data((128, 96)), data((96, 256))),
        "matmul_batched": (lambda A, B: jnp.matmul(A, B), data((3, 40, 24)), data((3, 24, 50))),
        "matmul_bcast": (lambda A, B: jnp.matmul(A, B), data((2, 3, 8, 5)), data((5, 7))),
        "matvec": (lambda A, B: jnp.matmul(A, B), data((30, 20)), data(20)),
        "vecmat": (lambda A, B: jnp.matmul(A, B), data(30), data((30, 20))),
        "dot": (lambda A, B: jnp.dot(A, B), data((17, 9)), data((9, 4))),
        "dot_1d": (lambda A, B: jnp.dot(A, B), data(300), data(300)),
        "vdot": (lambda A, B: jnp.vdot(A, B), data((4, 5)), data((4, 5))),
        "inner": (lambda A, B: jnp.inner(A, B), data((4, 5)), data((3, 5))),
        "outer": (lambda A, B: jnp.outer(A, B), data(7), data(11)),
        "tensordot": (lambda A, B: jnp.tensordot(A, B, axes=2), data((3, 4, 5)), data((4, 5, 6))),
        "einsum_mm": (lambda A, B: jnp.einsum("ij,jk->ik", A, B), data((8, 9)), data((9, 10))),
        "einsum_bmm": (lambda A, B: jnp.einsum("bij,bkj->bik", A, B), data((2, 8, 9)),
                       data((2, 7, 9))),
        "einsum_trace": (lambda A: jnp.einsum("ii->", A), data((9, 9))),
        "einsum_diag": (lambda A: jnp.einsum("ii->i", A), data((9, 9))),
    }
    for name, (fn, *args) in ops.items():
        for dt in (F32, I64):
            args_dt = [a.astype(dt) if a.dtype.kind == "f" else a for a in args]
            out.append(case(f"{name}_{dt}", fn, *args_dt, slow=dt == I64))
    for name, (fn, *args) in linalg.items():
        for dt in (F32, F64, I32):
            out.append(case(f"{name}_{dt}", fn, *[a.astype(dt) for a in args],
                            slow=dt != F32))
    return out


def nn_cases():
    x4, x3 = data((2, 4, 9, 11)), data((2, 4, 30))
    w2, w1 = data((6, 4, 3, 3)), data((6, 4, 3))
    q, k, v = data((2, 3, 10, 16)), data((2, 3, 12, 16)), data((2, 3, 12, 16))
    ops = {
        "relu": (nn.relu, x4), "relu6": (nn.relu6, x4),
        "leaky_relu": (lambda X: nn.leaky_relu(X, 0.2), x4), "elu": (nn.elu, x4),
        "gelu": (nn.gelu, x4), "gelu_tanh": (lambda X: nn.gelu(X, approximate="tanh"), x4),
        "sigmoid": (nn.sigmoid, x4), "silu": (nn.silu, x4), "softplus": (nn.softplus, x4),
        "tanh": (nn.tanh, x4),
        "softmax": (lambda X: nn.softmax(X, dim=-1), data((16, 300))),
        "softmax_dim0": (lambda X: nn.softmax(X, dim=0), data((70, 5))),
        "softmax_long": (lambda X: nn.softmax(X, dim=-1), data((4, 20000))),
        "log_softmax": (lambda X: nn.log_softmax(X, dim=1), data((8, 100))),
        "layer_norm": (lambda X, W, B: nn.layer_norm(X, (X.shape[-1],), W, B),
                       data((16, 256)), data(256), data(256)),
        "layer_norm_2d": (lambda X: nn.layer_norm(X, X.shape[-2:]), data((3, 5, 6))),
        "rms_norm": (lambda X, W: nn.rms_norm(X, (X.shape[-1],), W), data((8, 64)), data(64)),
        "batch_norm": (lambda X, M, V: nn.batch_norm(X, M, V), x4, data(4), data(4)),
        "batch_norm_train": (lambda X: nn.batch_norm(X, None, None, training=True), x4),
        "linear": (lambda X, W, B: nn.linear(X, W, B), data((10, 32)), data((20, 32)), data(20)),
        "conv1d": (lambda X, W: nn.conv1d(X, W, padding=1), x3, w1),
        "conv1d_s2d2": (lambda X, W: nn.conv1d(X, W, stride=2, dilation=2), x3, w1),
        "conv2d": (lambda X, W: nn.conv2d(X, W), x4, w2),
        "conv2d_s2p1": (lambda X, W, B: nn.conv2d(X, W, B, stride=2, padding=1), x4, w2,
                        data(6)),
        "conv2d_groups": (lambda X, W: nn.conv2d(X, W, groups=2, padding="same"), x4,
                          data((6, 2, 3, 3))),
        "conv2d_big": (lambda X, W: nn.conv2d(X, W, padding=1), data((4, 32, 28, 28)),
                       data((64, 32, 3, 3))),
        "conv3d": (lambda X, W: nn.conv3d(X, W), data((1, 2, 5, 6, 7)), data((3, 2, 2, 2, 2))),
        "conv_transpose1d": (lambda X, W: nn.conv_transpose1d(X, W, stride=2), x3,
                             data((4, 5, 3))),
        "conv_transpose2d": (lambda X, W: nn.conv_transpose2d(X, W, stride=2, padding=1), x4,
                             data((4, 3, 3, 3))),
        "max_pool1d": (lambda X: nn.max_pool1d(X, 3, 2), x3),
        "max_pool2d": (lambda X: nn.max_pool2d(X, 2), x4),
        "max_pool2d_pad": (lambda X: nn.max_pool2d(X, 3, 2, padding=1, ceil_mode=True), x4),
        "avg_pool1d": (lambda X: nn.avg_pool1d(X, 4), x3),
        "avg_pool2d": (lambda X: nn.avg_pool2d(X, 3, padding=1, count_include_pad=False), x4),
        "adaptive_avg_pool1d": (lambda X: nn.adaptive_avg_pool1d(X, 7), x3),
        "adaptive_avg_pool2d": (lambda X: nn.adaptive_avg_pool2d(X, (3, 4)), x4),
        "adaptive_max_pool2d": (lambda X: nn.adaptive_max_pool2d(X, 2), x4),
        "interpolate_nearest": (lambda X: nn.interpolate(X, scale_factor=2), x4),
        "interpolate_bilinear": (lambda X: nn.interpolate(X, size=(5, 17), mode="bilinear",
                                                          align_corners=False), x4),
        "interpolate_aa": (lambda X: nn.interpolate(X, size=(3, 2), mode="bicubic",
                                                    antialias=True), x4),
        "embedding": (lambda I, E: nn.embedding(I, E), rng.integers(0, 30, (4, 7)),
                      data((30, 16))),
        "sdpa": (lambda Q, K, V: nn.scaled_dot_product_attention(Q, K, V), q, k, v),
        "sdpa_causal": (lambda Q, K, V: nn.scaled_dot_product_attention(Q, K, V, is_causal=True),
                        q, k, v),
        "mlp": (lambda X, W1, W2: nn.linear(nn.gelu(nn.linear(X, W1)), W2), data((32, 64)),
                data((128, 64)), data((64, 128))),
    }
    out = []
    for name, (fn, *args) in ops.items():
        for dt in (F32, F64):
            args_dt = [a.astype(dt) if a.dtype.kind == "f" else a for a in args]
            out.append(case(f"nn_{name}_{dt}", fn, *args_dt, slow=dt == F64))
    return out


def dynamic_cases():
    """dynamic=True definitions (sizes are kernel parameters), and the automatic schedule
    for a small device (64 threads per block, 2 multiprocessors: grid-stride loops)."""
    small = dataclasses.replace(GPU, threads_per_block=64, multiprocessors=2)
    x, y = data((37, 129)), data(129)
    ops = {
        "add_bcast": (lambda X, Y: X * Y + 1, x, y),
        "floordiv_int": (lambda X, Y: jnp.floor_divide(X, Y) + jnp.remainder(X, Y),
                         data((9, 40), I32), data(40, I32)),
        "power_int": (lambda X, Y: jnp.power(X, Y), data((9, 40), I64), data(40, I64)),
        "where": (lambda X, Y: jnp.where(X > 1, X, Y), x, y),
        "cast": (lambda X: jnp.astype(X * 100, np.int16), x),
        "sum1": (lambda X: jnp.sum(X, axis=1), x),
        "sum_k": (lambda X: jnp.sum(X, axis=0, keepdims=True), x),
        "max_all": (lambda X: jnp.max(X), x),
        "sum_all3": (lambda X: jnp.sum(X), data((3, 5, 7), I32)),   # (three axes as one)
        "argmax1": (lambda X: jnp.argmax(X, axis=1), x),
        "mean_var": (lambda X: jnp.var(X, axis=1) + jnp.mean(X, axis=1), x),
        "softmax": (lambda X: nn.softmax(X, dim=-1), x),
        "layer_norm": (lambda X: nn.layer_norm(X, X.shape[-1:]), x),
        "matmul": (lambda A, B: jnp.matmul(A, B), data((33, 20)), data((20, 65))),
        "bmm": (lambda A, B: jnp.matmul(A, B), data((3, 33, 20)), data((3, 20, 65))),
        "conv2d": (lambda X, W: nn.conv2d(X, W, padding=1), data((2, 4, 9, 11)),
                   data((6, 4, 3, 3))),
        "max_pool2d": (lambda X: nn.max_pool2d(X, 2), data((2, 4, 9, 11))),
        "transpose": (lambda X: jnp.transpose(X) * 2, x),
        "reshape": (lambda X: jnp.reshape(X, (-1,)), x),
        "concatenate": (lambda X, Y: jnp.concatenate([X, Y], axis=0), x, x),
        "pad_reflect": (lambda X: jnp.pad(X, 2, mode="reflect"), x),
        "roll": (lambda X: jnp.roll(X, 5, axis=1), x),
        "take": (lambda X, I: jnp.take(X, I, axis=0), x, rng.integers(0, 37, 11)),
        "tile": (lambda X: jnp.tile(X, 2), y),
        "flip": (lambda X: jnp.flip(X, 1), x),
        "bool_any": (lambda X: jnp.any(X, axis=1), data((37, 129), BOOL)),
    }
    out = []
    for name, (fn, *args) in ops.items():
        out.append(case(f"dyn_{name}", fn, *args, dynamic=True))
        out.append(case(f"dyn_{name}_small", fn, *args, dynamic=True, target=small))
        out.append(case(f"static_{name}_small", fn, *args, target=small, slow=True))
    return out


def cast_cases():
    kinds = [F32, F64, I32, I64, BOOL] + NARROW
    return [case(f"cast_{a}_{b}", lambda X, b=b: jnp.astype(X, b) if b != BOOL
                 else X != 0, data((6, 7), a)) for a in kinds
            for b in kinds if a != b]


# ---------------------------------------------------------------------------------------
# The battery: generating and compiling
# ---------------------------------------------------------------------------------------

class _Fallbacks(logging.Handler):
    """The automatic schedule's fallbacks (a level that failed, e.g. because code
    generation refused it), recorded from the jitdl.schedule logger."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.notes = []

    def emit(self, record):
        self.notes.append(record.getMessage())


def generate(cases):
    """({module name: CUDA C}, {case name: error of lowering or code generation},
    {case name: the schedule's fallback notes}). A case whose definition does not trace
    (the op refuses the dtype, as NumPy would) is left out; the count of those is the
    fourth item."""
    modules, errors, fallbacks, refused = {}, {}, {}, 0
    handler = _Fallbacks()
    logger = logging.getLogger("jitdl.schedule")
    saved = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        for c in cases:
            try:
                args = c.f._args(tuple(c.args), c.kwargs)
                specs = c.f._specs(args)
                graph = c.f._trace(specs, args)
            except (JitdlError, TypeError, ValueError):
                refused += 1
                continue
            handler.notes = []
            try:
                low = c.f._lower(specs, graph=graph, target=c.target)
                modules[c.name] = pipeline.build(low, c.target).texts["cuda"]
            except JitdlError as e:
                errors[c.name] = f"{type(e).__name__}: {e}"
            if handler.notes:
                fallbacks[c.name] = list(handler.notes)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)
    return modules, errors, fallbacks, refused


def distinct(modules, defnames):
    """The modules whose texts differ other than by the definition's name (jnp.amax and
    jnp.max, say, give the same kernels): one of each is compiled."""
    out, seen = {}, set()
    for name, src in modules.items():
        d = re.escape(defnames[name])
        norm = re.sub(rf"\bjd_{d}_k(\d+)\b", r"jd_F_k\1", src)
        norm = re.sub(rf"\b{d}(_\d+)?\b", "F", norm)
        if norm not in seen:
            seen.add(norm)
            out[name] = src
    return out


def check_family(cases, least, slow=False):
    """Every case of a family generates CUDA C at the automatic schedule's first level
    (no fallback) and compiles with nvcc; at least `least` of them are compiled (so a
    family cannot pass by refusing everything)."""
    names = [c.name for c in cases]
    cases = [c for c in cases if c.slow == slow]
    assert len(set(names)) == len(names), "case names repeat"
    modules, errors, fallbacks, refused = generate(cases)
    failed = nvcc_compile(distinct(modules, {c.name: c.f.name for c in cases})) if NVCC else {}
    parts = []
    if errors:
        parts.append(f"lowering or CUDA code generation failed for {len(errors)} cases:\n" +
                     "\n".join(f"  {n}: {e[:500]}" for n, e in errors.items()))
    if failed:
        parts.append(f"nvcc rejected the CUDA C of {len(failed)} of {len(modules)} modules: "
                     f"{', '.join(failed)}\n\n{report(failed, modules)}")
    if fallbacks:       # a level that failed hides a schedule or code generation bug
        parts.append("the automatic GPU schedule fell back (a level failed to lower or to "
                     "generate CUDA C) for:\n" + "\n".join(
                         f"  {n}: {notes[0][:400]}" for n, notes in fallbacks.items()))
    if parts:
        pytest.fail("\n\n".join(parts), pytrace=False)
    assert len(modules) >= least, (len(modules), refused)
    if NVCC is None:
        pytest.skip(f"{len(modules)} modules generated; nvcc is not on PATH: not compiled")
    return modules, fallbacks


FAMILIES = {
    "test_definitions": (test_definitions_cases, 200),
    "ufuncs": (ufunc_cases, 350),
    "reductions": (reduction_cases, 150),
    "shapes_and_linalg": (shape_cases, 50),
    "nn": (nn_cases, 40),
    "dynamic_and_small_targets": (dynamic_cases, 40),
    "casts": (cast_cases, 50),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_generated_kernels_compile_with_nvcc(family):
    build, least = FAMILIES[family]
    check_family(build(), least)


@pytest.mark.slow
@pytest.mark.parametrize("family", [f for f in FAMILIES
                                    if f not in ("test_definitions", "casts")])
def test_more_generated_kernels_compile_with_nvcc(family):
    """The rest of the battery: float64 and int64 versions, more reductions, the
    automatic schedule for a small device."""
    build, least = FAMILIES[family]
    check_family(build(), 10, slow=True)


def test_with_config_names_the_gpu_schedules_knobs():
    """with_config() checks knob names against the space of the target the code is for:
    the GPU matmul's tile knobs for cuda_source(), the CPU schedule's for a CPU call."""
    f = matmul.with_config(**{"C.tm": 8, "C.tn": 8, "C.ty": 8, "C.tx": 16})
    a, b = data((256, 64)), data((64, 256))
    src = f.cuda_source(a, b)
    assert "__launch_bounds__(128)" in src and "float C_acc[64];" in src
    with pytest.raises(jd.ScheduleError, match="no knob named 'C.tm'"):
        f(a, b)


# ---------------------------------------------------------------------------------------
# Index width and grid limits of the automatic schedule at sizes past 2**31
# ---------------------------------------------------------------------------------------

def _huge(shape, dtype=F32):
    """An array of `shape` without its memory (one element, broadcast): code generation
    reads only the shape and dtype."""
    return np.broadcast_to(np.ones((), dtype), shape)


# (definition, arguments whose flat indices pass 2**31 - 1 (a (50000, 50000) float32 is
# 10 GB: an H200 holds it), the same at sizes whose indices all fit in 32 bits)
_WIDTH_CASES = {
    "elementwise": (lambda A, B: A * B + 1, [(50000, 50000), (50000,)], [(3000, 3000), (3000,)]),
    "row_sum": (lambda X: jnp.sum(X, axis=1), [(50000, 50000)], [(3000, 3000)]),
    "column_max": (lambda X: jnp.max(X, axis=0), [(50000, 50000)], [(3000, 3000)]),
    "whole_sum": (lambda X: jnp.sum(X), [(3 * 2 ** 30,)], [(2 ** 24,)]),
    "argmax": (lambda X: jnp.argmax(X), [(50000, 50000)], [(3000, 3000)]),
    "softmax": (lambda X: nn.softmax(X, axis=-1), [(50000, 50000)], [(3000, 3000)]),
    "matmul": (lambda A, B: jnp.matmul(A, B), [(50000, 50000), (50000, 300)],
               [(3000, 3000), (3000, 300)]),
    "batched_matmul": (lambda A, B: jnp.matmul(A, B), [(600000, 64, 64), (64, 64)],
                       [(70000, 64, 64), (64, 64)]),
    "conv2d": (lambda X, W: nn.conv2d(X, W), [(130, 64, 512, 512), (64, 64, 3, 3)],
               [(2, 64, 512, 512), (64, 64, 3, 3)]),
    "transpose": (lambda X: jnp.transpose(X) * 2, [(50000, 50000)], [(3000, 3000)]),
}


def _kernels(source):
    """(launch line, text) of each kernel of a module's CUDA C."""
    launches = re.findall(r"^//   \w+<<<\((\d+), (\d+), (\d+)\)", source, re.M)
    bodies = source.split('extern "C" __global__')[1:]
    assert len(launches) == len(bodies), source[:2000]
    return [(tuple(map(int, g)), b) for g, b in zip(launches, bodies)]


def _reads_operand(body):
    """Whether a kernel's text reads or writes an operand A or X (the large one)."""
    params = re.findall(r"\* __restrict__ (\w+)", body.split("{", 1)[0])
    return any(re.search(rf"\b{p}\[", body.split("{", 1)[1]) for p in params if p in ("A", "X"))


@pytest.mark.parametrize("name", list(_WIDTH_CASES))
def test_indices_past_two_to_the_31_are_64_bit(name):
    """Kernels of the automatic schedule compute indices in 32 bits only where every one
    provably fits (codegen.cuda._fits_int32): a kernel that reads an operand of more than
    2**31 - 1 elements keeps them in 64 bits (the loop counters of its grid-stride loops
    too), one of the same definition on smaller operands narrows them, and every grid stays
    within the device's limits (2**31 - 1 blocks along x, 65535 along y and z: the tiles
    of a batched matmul of 600000 matrices go to x, still tiled)."""
    f, huge, small = _WIDTH_CASES[name]
    for shapes, fits in ((huge, False), (small, True)):
        source = jd.compute(f).cuda_source(*[_huge(s) for s in shapes])
        kernels = [(g, b) for g, b in _kernels(source) if _reads_operand(b)]
        assert kernels, source[-3000:]
        for grid, body in kernels:
            assert all(g <= m for g, m in zip(grid, GPU.max_grid_dims)), (grid, body[:300])
            narrow = re.search(r"\(int\)(blockIdx|threadIdx)|for \(int ", body) is not None
            wide = re.search(r"\(long long\)(blockIdx|threadIdx)|for \(long long ", body)
            assert narrow == fits and (fits or wide), (shapes, body[:1500])
            # (tiled still: past a limit the level without tiles would serve, unnoticed)
            assert "__shared__" in body or name not in ("matmul", "batched_matmul", "conv2d")


_INT64_CASES = {    # (definition, its int64 operands' shapes, a text its data needs)
    "add": (lambda X, Y: X + Y, [(30, 300), (30, 300)], "(unsigned long long)X["),
    "large_constant": (lambda X: X * 3000000000 + 7, [(30, 300)], "3000000000LL"),
    "row_sum": (lambda X: jnp.sum(X, axis=1), [(30, 300)], "(unsigned long long)"),
    "row_max": (lambda X: jnp.max(X, axis=1), [(30, 300)], "(-9223372036854775807LL - 1)"),
    "argmax": (lambda X: jnp.argmax(X, axis=1), [(30, 300)], "long long"),
    "gather": (lambda X, I: jd.tensor(I.shape, lambda i, j: X[i, I[i, j]]),
               [(30, 300), (30, 9)], "long long"),
    "floordiv": (lambda X: X // 7 - X % 5, [(30, 300)], "jd_idiv<long long>"),
}


@pytest.mark.parametrize("name", list(_INT64_CASES))
def test_int64_data_leaves_its_indices_32_bit(name):
    """An int64 value read from memory (int64 data, or an index made of it: a gather's
    ids) made every index and loop counter of its kernel 64-bit (codegen.cuda._fits_int32
    took its unbounded range as an index's), and a constant past int32 (the identity
    -2**63 of a max) did the same. Such expressions are emitted in 64 bits either way, so
    the indices stay 32-bit where they fit, and the data's arithmetic and constants stay
    64-bit; past 2**31 - 1 elements the indices are 64-bit as before. Values: the
    emulator's test_int64_data_of_narrow_kernels."""
    f, shapes, text = _INT64_CASES[name]
    source = jd.compute(f).cuda_source(*[_huge(s, I64) for s in shapes])
    narrow = re.search(r"\(int\)(blockIdx|threadIdx)|for \(int ", source) is not None
    wide = re.search(r"\(long long\)(blockIdx|threadIdx)|for \(long long ", source)
    assert narrow and not wide and text in source, source[source.index("extern"):]
    if name != "gather":    # (its index i * n + I[i, j] is 64-bit, its loops fit)
        big = jd.compute(f).cuda_source(*[_huge((50000, 50000), I64) for s in shapes])
        assert re.search(r"\(long long\)(blockIdx|threadIdx)|for \(long long ", big), big
    if NVCC is not None:
        compile_or_fail({name: source})
