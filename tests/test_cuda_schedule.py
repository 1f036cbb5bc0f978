"""The CUDA target's schedules, checked without a GPU.

A definition lowered for the CUDA target (its automatic GPU schedule, or a user schedule
with bind / shared copies / reductions across threads) is a loop IR whose bound loops
run serially anywhere but on a GPU. Compiled for the CPU it must compute what NumPy
does: this checks the GPU schedules, the lowering of shared copies (a block's copy
covers what all its threads read), register tiles and cross-thread reductions. The
CUDA C itself is checked by tests/test_cuda_codegen.py (nvcc, an emulator)."""
import dataclasses
import re

import numpy as np
import pytest

import jitdl as jd
import jitdl.numpy as jnp
from jitdl import nn, pipeline
from jitdl.errors import CompileError, ScheduleError
from jitdl.runtime import engine
from jitdl.runtime.kernel import Kernel
from jitdl.target.cuda import CUDA

GPU = CUDA()
SMALL = dataclasses.replace(GPU, threads_per_block=64, multiprocessors=2)
rng = np.random.default_rng(12)


def lowered(f, args, target=GPU, schedule=None):
    args = f._args(tuple(args), {})
    specs = f._specs(args)
    graph = f._trace(specs, args)
    if schedule is not None:
        return pipeline.lower(graph, target, f._options(), schedule_fn=schedule)
    return f._lower(specs, graph=graph, target=target)


def run_on_cpu(f, *args, target=GPU, schedule=None, level=None):
    """f's CUDA loop IR compiled for the CPU and run; outputs start as NaN (or -1), so
    an element no thread writes shows."""
    low = lowered(f, args, target, schedule)
    if level is not None:
        assert low.auto_level == level, low.auto_level
    art = pipeline.build(low, "cpu")
    sig = art.signature
    k = Kernel(sig, engine.Loaded(art.obj, sig.symbol), {})
    if any(not isinstance(d, int) for _, shape, _ in sig.outputs for d in shape):
        return k(args), low         # (dynamic: the kernel computes its output shape)
    outs = []
    for _, shape, dt in sig.outputs:
        o = np.empty(shape, dt)
        o[...] = np.nan if np.dtype(dt).kind == "f" else -1
        outs.append(o)
    got = k(args, out=outs[0] if len(outs) == 1 else tuple(outs))
    return got, low


def close(got, want, rtol=2e-5, atol=2e-5):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


@jd.compute
def axpy(A, B):
    return jd.tensor(A.shape, lambda i, j: jd.exp(A[i, j]) * B[i, j] + 1, name="C")


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


@jd.compute
def bmm(A, B):
    return jnp.matmul(A, B)


@jd.compute
def rowsum(X):
    n, m = X.shape
    k = jd.reduce_axis(m, name="k")
    return jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k), name="S")


@jd.compute
def colmax(X):
    return jnp.max(X, axis=0)


@jd.compute
def layer_norm(X, W, B):
    return nn.layer_norm(X, (X.shape[-1],), W, B)


@jd.compute
def conv(X, W):
    return nn.conv2d(X, W, padding=1)


@jd.compute(dynamic=True)
def dyn_add(A, B):
    return jnp.sqrt(jnp.abs(A)) + B * 2


def ref_softmax(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def f32(*shape):
    return rng.uniform(-1, 1, shape).astype(np.float32)


@pytest.mark.parametrize("shape", [(100, 37), (3, 5), (1000, 300)])
def test_elementwise_is_a_grid_stride_loop(shape):
    a, b = f32(*shape), f32(*shape)
    got, low = run_on_cpu(axpy, a, b, target=SMALL, level="full")
    close(got, np.exp(a.astype(np.float64)) * b + 1)
    text = str(low.func)
    assert "threadIdx.x" in text and ("blockIdx.x" in text) == (a.size > 64)


@pytest.mark.parametrize("shape,level", [((20, 300), "full"), ((7, 1000), "full"),
                                         ((50, 40), "full"), ((4, 130), "full")])
def test_softmax_one_block_per_row(shape, level):
    x = f32(*shape) * 5
    got, low = run_on_cpu(softmax, x, level=level)
    close(got, ref_softmax(x))
    if shape[1] >= 128:          # reductions across the block, the row in shared memory
        text = str(low.func)
        assert "over threadIdx.x" in text and "(shared)" in text


def test_row_and_column_reductions():
    x = f32(33, 700)
    got, low = run_on_cpu(rowsum, x)
    close(got, x.astype(np.float64).sum(1), rtol=1e-4, atol=1e-4)
    assert "sum over threadIdx.x" in str(low.func)
    got, low = run_on_cpu(colmax, x)
    close(got, x.max(0))
    assert "over threadIdx.x" not in str(low.func)     # per thread: coalesced columns


@pytest.mark.parametrize("m,k,n", [(128, 64, 128), (100, 37, 70), (64, 8, 64), (17, 300, 33)])
def test_matmul_tiles_in_shared_memory(m, k, n):
    a, b = f32(m, k), f32(k, n)
    got, low = run_on_cpu(matmul, a, b, level="full")
    close(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    text = str(low.func)
    assert "A_cache_l" in text and "(shared)" in text and "C_acc: float32[64]" in text


def _enclosing(lines, k):
    """The lines of loop IR text that enclose line k (less indented, above it)."""
    out, depth = [], len(lines[k]) - len(lines[k].lstrip())
    for ln in reversed(lines[:k]):
        d = len(ln) - len(ln.lstrip())
        if d < depth:
            out.append(ln.strip())
            depth = d
    return out


@pytest.mark.parametrize("case", ["matmul", "conv"])
def test_a_tile_past_the_output_accumulates_unguarded(case):
    """A register tile that reaches past the output (one block of a 37 x 29 matmul; a
    7 x 7 image's 49 pixels in 64-pixel tiles) multiplies and adds without guards, as the
    blocks inside a larger output do, and only its stores are guarded: past the output
    it reads the block's copies at the last row's, column's or pixel's indices. Guards
    in the unrolled loop took NVVM 13-34 s to compile (1-4 s without)."""
    if case == "matmul":
        a, b = f32(37, 64), f32(64, 29)
        got, low = run_on_cpu(matmul, a, b, level="full")
        close(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    else:
        x, w = f32(1, 32, 7, 7), f32(64, 32, 3, 3)
        got, low = run_on_cpu(conv, x, w, level="full")
        close(got, _conv_reference(x, w, 1, 1, 1), rtol=1e-4, atol=1e-4)
    lines = str(low.func).splitlines()
    updates = [k for k, ln in enumerate(lines) if re.match(r"\s*\w+_acc\[.*\] = \w+_acc\[", ln)]
    assert updates
    for k in updates:
        assert not [ln for ln in _enclosing(lines, k) if ln.startswith("if ")], lines[k]
    stores = [k for k, ln in enumerate(lines) if re.match(r"\s*(C|conv2d)\[.*= \w+_acc\[", ln)]
    assert stores and all(_enclosing(lines, k)[0].startswith("if ") for k in stores)


def _conv_reference(x, w, stride, pad, dil, groups=1):
    """torch's conv2d in float64 by shifted products (no jitdl code)."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, f, oh, ow))
    fg = f // groups
    for g in range(groups):
        for r in range(kh):
            for t in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, r * dil:r * dil + stride * (oh - 1) + 1:stride,
                           t * dil:t * dil + stride * (ow - 1) + 1:stride]
                out[:, g * fg:(g + 1) * fg] += np.einsum(
                    "nchw,fc->nfhw", patch, w[g * fg:(g + 1) * fg, :, r, t])
    return out


CONVS = [((2, 40, 28, 28), (72, 40, 3, 3), 1, 1, 1), ((1, 8, 17, 13), (24, 8, 3, 3), 2, 1, 1),
         ((3, 5, 9, 31), (20, 5, 2, 3), 1, 0, 2), ((2, 64, 14, 14), (128, 64, 1, 1), 1, 0, 1),
         ((1, 32, 7, 7), (64, 32, 3, 3), 1, 1, 1)]
# (each case compiles the GPU loop IR, its tiles unrolled, for the CPU: seconds apiece)


@pytest.mark.parametrize("xs,ws,stride,pad,dil", CONVS)
def test_convolution_tiles_like_a_matmul(xs, ws, stride, pad, dil):
    """conv2d's reduction is tiled like a matmul (rows: output channels; columns: the
    output's pixels, fused; each step a few input channels with the whole window), and
    the block's copy of the input holds the rows its pixels span, not the whole image."""
    x, w = f32(*xs), f32(*ws)
    f = jd.compute(lambda X, W: nn.conv2d(X, W, stride=stride, padding=pad, dilation=dil))
    got, low = run_on_cpu(f, x, w, level="full")
    close(got, _conv_reference(x, w, stride, pad, dil), rtol=1e-4, atol=1e-4)
    text = str(low.func)
    assert "(shared)" in text and "conv2d_acc: float32[" in text
    oh = (xs[2] + 2 * pad - dil * (ws[2] - 1) - 1) // stride + 1
    if oh * ((xs[3] + 2 * pad - dil * (ws[3] - 1) - 1) // stride + 1) > 128:
        # an image larger than a tile: its copy spans fewer rows than the image has
        rows = xs[2] + 2 * pad
        copies = [tuple(map(int, m.group(1).split(", "))) for m in re.finditer(
            r"(?:conv2d_pad|X)_cache_l: float32\[([0-9, ]+)\]", text)]
        assert copies and all(c[-2] < rows for c in copies), (copies, rows)


def test_strided_convolutions_read_their_input_in_place():
    """A convolution strided along its last axis reads its input there through a stage
    laid out as (kernel position, output column), kernel / stride times the input's
    size; the GPU inlines it, reading the input in place, where it was stored by a
    kernel of its own (a conv1d of (2, 8, 100000) by 64-wide kernels,
    stride 2: 205 MB, 32x the input)."""
    x, w = f32(1, 8, 9, 400), f32(16, 8, 3, 16)
    f = jd.compute(lambda X, W: nn.conv2d(X, W, stride=2))
    got, low = run_on_cpu(f, x, w)
    close(got, _conv_reference(x, w, 2, 0, 1), rtol=1e-4, atol=1e-4)
    text = str(low.func)
    assert "conv2d_cols:" not in text, text


def test_grouped_and_depthwise_convolutions_are_not_tiled_as_contractions():
    """A grouped convolution reads the input channel through the output channel: not a
    contraction of two operands' separate axes; it keeps the element-wise schedule."""
    x, w = f32(2, 8, 10, 10), f32(8, 1, 3, 3)
    f = jd.compute(lambda X, W: nn.conv2d(X, W, padding=1, groups=8))
    got, low = run_on_cpu(f, x, w)
    close(got, _conv_reference(x, w, 1, 1, 1, groups=8), rtol=1e-4, atol=1e-4)
    assert "(shared)" not in str(low.func)


def test_batched_matmul_binds_the_batch_to_blockIdx_z():
    a, b = f32(3, 40, 24), f32(3, 24, 50)
    got, low = run_on_cpu(bmm, a, b)
    close(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_tiles_past_the_grid_limits_of_y_and_z_go_to_blockIdx_x():
    """More batches than blockIdx.z takes, or more row tiles than blockIdx.y, keep the
    tiles: batch and row tiles fused on blockIdx.x (a batched matmul of 70000 matrices fell
    back to a thread per element, and so did every other stage of its definition). A
    target with a grid of 2 in y and z stands for the 65535 of a real one."""
    target = dataclasses.replace(GPU, max_grid_dims=(2 ** 31 - 1, 2, 2))
    for a, b in [(f32(3, 40, 24), f32(3, 24, 50)), (f32(300, 24), f32(24, 50)),
                 (f32(2, 300, 24), f32(24, 150))]:
        got, low = run_on_cpu(bmm, a, b, target=target, level="full")
        close(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
        assert "(shared)" in str(low.func)
        assert "blockIdx.z" not in str(low.func)


@jd.compute
def softmax_and_column_sum(X):
    e = jnp.exp(X - X.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True), X.sum(axis=0), X.max()


def test_rows_in_shared_memory_beside_other_readers_of_the_input():
    """A row's shared copy of the input is read by the row's stages (and those inlined
    into them) only: a column sum or a whole max of the same input reads it from memory.
    (The copy's readers were every stage reading the input: compute_at failed, and the
    whole definition fell back to the level without rows, a thread per row.)"""
    x = f32(300, 130)
    (sm, col, mx), low = run_on_cpu(softmax_and_column_sum, x, level="full")
    close(sm, ref_softmax(x))
    close(col, x.astype(np.float64).sum(axis=0), rtol=1e-4, atol=1e-4)
    assert mx == x.max()
    text = str(low.func)
    assert "X_cache_l: float32[1, 130] (shared)" in text
    assert "exp(X[" not in text and "exp(X_cache_l[" in text


@jd.compute
def normalized_matmul(X, W, V):
    return jnp.matmul(jd.nn.layer_norm(X, (X.shape[1],)), W), \
        jnp.matmul(X / X.sum(axis=1, keepdims=True), V)


def test_row_statistics_read_by_a_matmul_keep_the_tiles_and_a_block_per_row():
    """Row statistics the row fusion computed at a matmul's rows (a layer norm's mean and
    variance, the row sums of X / X.sum(axis=1)) are computed on their own, a block per
    row, and the matmul is tiled: the tiles' split of those rows failed the 'full' level."""
    x, w, v = f32(40, 200) + 2, f32(200, 20), f32(200, 30)
    (a, b), low = run_on_cpu(normalized_matmul, x, w, v, level="full")
    x64 = x.astype(np.float64)
    n = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
    close(a, n @ w, rtol=1e-4, atol=1e-4)
    close(b, x64 / x64.sum(1, keepdims=True) @ v, rtol=1e-4, atol=1e-4)
    assert "(shared)" in str(low.func) and "sum over threadIdx.x" in str(low.func)


@jd.compute
def two_matmuls_of_one_operand(A, B, C):
    return jnp.matmul(A, B) + jnp.matmul(A, C), jnp.matmul(A, C)


def test_matmuls_sharing_an_operand_each_tile_their_own_copy():
    """Each matmul's tile has its own shared copy of an operand they share (A_cache,
    A_cache1: a tensor may have a read cache per reader): the second cache_read of A was
    refused ('A already has a read cache') and the whole definition fell back to 'no
    tiling'."""
    a, b, c = f32(40, 33), f32(33, 50), f32(33, 50)
    (x, y), low = run_on_cpu(two_matmuls_of_one_operand, a, b, c, level="full")
    a64 = a.astype(np.float64)
    close(x, a64 @ b + a64 @ c, rtol=1e-4, atol=1e-4)
    close(y, a64 @ c, rtol=1e-4, atol=1e-4)
    text = str(low.func)
    assert "A_cache_l" in text and "A_cache1_l" in text


def test_layer_norm_conv_and_dynamic_sizes():
    x, w, bias = f32(16, 256), f32(256), f32(256)
    got, _ = run_on_cpu(layer_norm, x, w, bias)
    xd = x.astype(np.float64)
    want = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + 1e-5) * w + bias
    close(got, want, rtol=1e-4, atol=1e-4)
    xi, wi = f32(2, 3, 9, 11), f32(4, 3, 3, 3)
    got, _ = run_on_cpu(conv, xi, wi)
    xp = np.pad(xi.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((2, 4, 9, 11))
    for dy in range(3):
        for dx in range(3):
            want += np.einsum("nchw,oc->nohw", xp[:, :, dy:dy + 9, dx:dx + 11], wi[:, :, dy, dx])
    close(got, want, rtol=1e-4, atol=1e-4)
    for n in (5, 300, 1031):
        a, b = f32(n), f32(n)
        got, low = run_on_cpu(dyn_add, a, b, target=SMALL)
        close(got, np.sqrt(np.abs(a.astype(np.float64))) + b * 2)


def test_a_user_schedule_with_bind_shared_copies_and_a_thread_reduction():
    def sched(s, cfg):
        S = s["S"]
        (i,) = S.axis
        (k,) = S.reduce_axis
        ko, ki = s.split(k, 32)
        s.reorder(i, ki, ko)
        s.bind(i, "blockIdx.x")
        s.bind(ki, "threadIdx.x")
        c = s.cache_read("X", [S], "shared")
        s.compute_at(c, S, i)
    x = f32(9, 100)
    got, low = run_on_cpu(rowsum, x, schedule=sched)
    close(got, x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
    text = str(low.func)
    assert "X_cache_l: float32[1, 100] (shared)" in text
    assert "S_acc[0] = sum over threadIdx.x in range(32)" in text
    src = pipeline.build(low, GPU).texts["cuda"]
    assert "__shfl_down_sync" in src and "__shared__ __align__(16) float X_cache_l[100];" in src
    assert src.count("__syncthreads();") >= 2


def test_schedule_errors_are_clear():
    def bad_thread_extent(s, cfg):
        S = s["S"]
        (i,) = S.axis
        s.bind(S.reduce_axis[0], "threadIdx.x")
        s.bind(i, "blockIdx.x")
    with pytest.raises(ScheduleError, match="power of two up to 32 or a multiple of 32"):
        lowered(rowsum, [f32(4, 100)], schedule=bad_thread_extent)

    def bind_reduction_to_block(s, cfg):
        s.bind(s["S"].reduce_axis[0], "blockIdx.x")
    with pytest.raises(ScheduleError, match="bound only to threadIdx.x"):
        lowered(rowsum, [f32(4, 100)], schedule=bind_reduction_to_block)

    def bad_tag(s, cfg):
        s.bind(s["S"].axis[0], "threadIdx.w")
    with pytest.raises(ScheduleError, match="must be one of blockIdx.x"):
        lowered(rowsum, [f32(4, 100)], schedule=bad_tag)

    def too_many_threads(s, cfg):
        C = s["C"]
        i, j = C.axis
        s.bind(i, "blockIdx.x")
        s.bind(j, "threadIdx.x")
    low = lowered(axpy, [f32(4, 2048), f32(4, 2048)], schedule=too_many_threads)
    with pytest.raises(CompileError, match="over the device's limit"):
        pipeline.build(low, GPU)

    def twice(s, cfg):
        C = s["C"]
        i, j = C.axis
        s.bind(i, "threadIdx.x")
        s.bind(j, "threadIdx.x")
    with pytest.raises(ScheduleError, match="bind each index once per stage"):
        lowered(axpy, [f32(4, 8), f32(4, 8)], schedule=twice)


@pytest.mark.parametrize("then,want", [
    (lambda s, j: s.vectorize(j), r"vectorize: C.j is bound to threadIdx.x; vectorize loops "
                                  r"before binding them \(split it, bind one part"),
    (lambda s, j: s.unroll(j), r"unroll: C.j is bound to threadIdx.x"),
    (lambda s, j: s.parallel(j), r"parallel: C.j is bound to threadIdx.x; a loop bound to "
                                 r"a GPU index runs in parallel already"),
    (lambda s, j: s.split(j, 4), r"split: C.j is bound to threadIdx.x; split loops before "
                                 r"binding them, then bind the new loops"),
    (lambda s, j: s.fuse(s["C"].axis[0], j), r"fuse: C.j is bound to threadIdx.x"),
    (lambda s, j: s.bind(j, "blockIdx.y"), r"bind: C.j is bound to threadIdx.x already; a "
                                           r"loop takes one of bind, vectorize")])
def test_a_bound_loop_is_not_split_annotated_or_bound_again(then, want):
    """Splitting, fusing, vectorizing, unrolling or binding anew a loop bound to a GPU
    index dropped its binding without a word: bind(j, "threadIdx.x") then vectorize(j) ran
    the whole stage on one thread (a PerformanceWarning said none of its loops was
    bound), split(j, 4) after the bind left both parts serial."""
    def sched(s, cfg):
        i, j = s["C"].axis
        s.bind(i, "blockIdx.x")
        s.bind(j, "threadIdx.x")
        then(s, j)
    with pytest.raises(ScheduleError, match=want) as e:
        lowered(axpy, [f32(4, 8), f32(4, 8)], schedule=sched)
    assert "test_cuda_schedule.py" in str(e.value)     # the user's line (the lambda's)


def test_thread_reduction_refusals_point_at_the_bind():
    """What a reduction bound to threads needs (an extent of a power of two up to 32 or a
    multiple of 32, the reduction loops inside the data loops) is checked only when the
    stage is lowered; the ScheduleError points at the user's bind line (it had no line)."""
    import inspect

    @jd.compute
    def row_sum(X):
        n, m = X.shape
        k = jd.reduce_axis(m, name="k")
        return jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k), name="S")

    @jd.schedule(row_sum, target="cuda")
    def odd_extent(s, cfg):
        S = s["S"]
        s.bind(S.reduce_axis[0], "threadIdx.x")          # 23 threads
    with pytest.raises(ScheduleError, match="power of two up to 32") as e:
        row_sum.cuda_source(f32(4, 23))
    lines, first = inspect.getsourcelines(odd_extent)
    assert (e.value.loc.filename, e.value.loc.lineno) == (__file__, first + 3), e.value

    @jd.schedule(row_sum, target="cuda")
    def reduction_outside(s, cfg):
        S = s["S"]
        (i,), (k,) = S.axis, S.reduce_axis
        s.bind(k, "threadIdx.x")
        s.reorder(k, i)
    with pytest.raises(ScheduleError, match="must stay inside all its data loops") as e:
        row_sum.lower(f32(4, 32), target="cuda")
    lines, first = inspect.getsourcelines(reduction_outside)
    assert (e.value.loc.filename, e.value.loc.lineno) == (__file__, first + 4), e.value


def test_cuda_source_and_lower_need_no_gpu():
    a = f32(256, 256)      # two 128 x 128 tiles each way
    src = matmul.cuda_source(a, a)
    assert '__global__' in src and "__shared__" in src and "<<<" in src
    assert "blockIdx.y" in matmul.lower(a, a, target="cuda")
    # the CPU kernel of the same function is untouched by asking for CUDA C
    np.testing.assert_allclose(matmul(a, a), a.astype(np.float64) @ a, rtol=1e-4, atol=1e-4)


def test_sign_of_unsigned_values():
    """nvcc rejected it (tests/test_cuda_codegen.py compiles every kernel with warnings
    as errors): jd_sign compared an unsigned value with 0."""
    @jd.compute
    def usign(X):
        return jnp.sign(X)
    src = usign.cuda_source(rng.integers(0, 9, (4, 5)).astype(np.uint8))
    assert "jd_sign<unsigned char>" not in src and "!= 0)" in src


def test_names_of_math_functions_are_not_taken():
    """nvcc rejected it: nn.tanh's output, a buffer named tanh, hid the function tanh
    (float64) that computes it."""
    @jd.compute
    def tanh64(X):
        return nn.tanh(X)
    src = tanh64.cuda_source(f32(4, 5).astype(np.float64))
    assert "tanh[" not in src and "= tanh(X[" in src


def test_empty_outputs_keep_the_full_schedule():
    """A zero-size output's grid-stride loop split by 0 threads failed every level but
    the last (a kernel on one thread)."""
    low = lowered(axpy, [f32(0, 5), f32(0, 5)])
    assert low.auto_level == "full", low.auto_level
    got, _ = run_on_cpu(axpy, f32(0, 5), f32(0, 5))
    assert got.shape == (0, 5)


def _row_in_shared(s, cfg):       # a block per row of S, the row copied to shared memory
    S = s["S"]
    (i,) = S.axis
    ko, ki = s.split(S.reduce_axis[0], 32)
    s.reorder(i, ki, ko)
    s.bind(i, "blockIdx.x")
    s.bind(ki, "threadIdx.x")
    s.compute_at(s.cache_read("X", [S], "shared"), S, i)


def test_launch_limits_and_barriers_errors_name_the_loops():
    """The checks of a hand-written GPU schedule name the loop, the limit and the value:
    a block over the device's threads, a grid over its blocks along y, a thread extent
    that is not a constant, shared memory over the limit (each buffer's part)."""
    def bind(tags):
        def sched(s, cfg):
            for ax, tag in zip(s["C"].axis, tags):
                s.bind(ax, tag)
        return sched

    def build(f, args, sched):
        return pipeline.build(lowered(f, args, schedule=sched), GPU)
    with pytest.raises(CompileError, match=r"2048 threads is over the device's limits of "
                       r"1024 threads .*\(loop j over 2048 bound to threadIdx.x\)"):
        build(axpy, [f32(4, 2048)] * 2, bind(["blockIdx.x", "threadIdx.x"]))
    with pytest.raises(CompileError, match=r"8x1x100 = 800 threads .* 1024x1024x64 along "
                       r"x, y, z .*loop i over 100 bound to threadIdx.z"):
        build(axpy, [f32(100, 8)] * 2, bind(["threadIdx.z", "threadIdx.x"]))
    with pytest.raises(CompileError, match=r"70000 blocks bound to blockIdx.y are over the "
                       r"device's limit of 65535 \(loop i over 70000 bound to blockIdx.y\)"):
        build(axpy, [f32(70000, 2)] * 2, bind(["blockIdx.y", "threadIdx.x"]))
    with pytest.raises(CompileError, match=r"must be a constant, got A_n0 \(loop idx0 over "
                       r"A_n0 bound to threadIdx.x\)"):
        build(dyn_add, [f32(10)] * 2,
              lambda s, cfg: s.bind(s[list(s.stages)[-1]].axis[0], "threadIdx.x"))

    def outer_on_threads(s, cfg):   # (the outer part of a split of a symbolic loop)
        o, i = s.split(s[list(s.stages)[-1]].axis[0], 4)
        s.bind(o, "threadIdx.y")
        s.bind(i, "threadIdx.x")
    # the extent as the loop IR prints it (it was the CUDA C's `jd_idiv<long long>((A_n0
    # + 3LL), 4LL)`)
    with pytest.raises(CompileError, match=r"must be a constant, got \(A_n0 \+ 3\) // 4 "
                       r"\(loop idx0_o over \(A_n0 \+ 3\) // 4 bound to threadIdx.y\)"):
        build(dyn_add, [f32(10)] * 2, outer_on_threads)
    with pytest.raises(CompileError, match=r"needs 80000 bytes of shared memory \(X_cache_l "
                       r"1x20000: 80000\), over the device's 49152 per block"):
        build(rowsum, [f32(4, 20000)], _row_in_shared)

    def rows_by_4(s, cfg):          # 9 rows in blocks of 4 threads along y
        S = s["S"]
        io, ii = s.split(S.axis[0], 4)
        ko, ki = s.split(S.reduce_axis[0], 32)
        s.reorder(io, ii, ki, ko)
        s.bind(io, "blockIdx.x")
        s.bind(ii, "threadIdx.y")
        s.bind(ki, "threadIdx.x")
    for n in (8, 9):                # 9 rows: the threads past them join the reduction
        x = f32(n, 100)             # (tests/test_cuda_emulated.py runs it)
        got, low = run_on_cpu(rowsum, x, schedule=rows_by_4)
        close(got, x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
        assert "__shfl_down_sync" in pipeline.build(low, GPU).texts["cuda"]


@jd.compute
def centered(X):
    n, m = X.shape
    k = jd.reduce_axis(m, name="k")
    M = jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k), name="M")
    return jd.tensor((n, m), lambda i, j: X[i, j] - M[i], name="Y")


def mean_at_threads(width, threads=32):
    """A schedule of centered: Y's columns split by `width` on threadIdx.x, the row sum M
    computed at that thread loop with its reduction across `threads` threads."""
    def sched(s, cfg):
        Y, M = s["Y"], s["M"]
        i, j = Y.axis
        jo, ji = s.split(j, width)
        s.bind(i, "blockIdx.x")
        s.bind(ji, "threadIdx.x")
        s.compute_at(M, Y, ji)
        ko, ki = s.split(M.reduce_axis[0], threads)
        s.reorder(ki, ko)
        s.bind(ki, "threadIdx.x")
    return sched


def test_a_reduction_narrower_than_a_block_of_odd_width_is_refused():
    """A reduction across 16 threads in a block 48 wide along x: the other threads join
    it with the identity, which the shuffles' groups of a power of two cannot take in
    (a block whose width is a power of two or a multiple of 32 runs: test_cuda_emulated)."""
    low = lowered(centered, [f32(3, 70)], schedule=mean_at_threads(48, 16))
    with pytest.raises(ScheduleError, match=r"the reduction of M_acc across 16 threads along "
                       r"x runs in a block 48 threads wide along x, .* a power of two up to "
                       r"32 or a multiple of 32"):
        pipeline.build(low, GPU)


def test_a_block_over_the_thread_limit_names_the_stages_of_loops_of_one_name():
    """Two reductions of a row (a layer norm's mean and variance), each with its k.i bound
    to 2048 threads: the message named `loop k_i over 2048` twice; it names each loop's
    stage now, and points at the user's bind of the loop (the schedule's first bind, of
    blockIdx.x, before: the loop's variable k_i was looked for as the loop k.i)."""
    import inspect

    @jd.compute
    def moments(X):
        n, m = X.shape
        k = jd.reduce_axis(m, name="k")
        M = jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k), name="M")
        k2 = jd.reduce_axis(m, name="k")
        V = jd.tensor((n,), lambda i: jd.sum(X[i, k2] * X[i, k2], axis=k2), name="V")
        return jd.tensor((n, m), lambda i, j: (X[i, j] - M[i]) * V[i], name="Y")

    def sched(s, cfg):
        Y, M, V = s["Y"], s["M"], s["V"]
        s.bind(Y.axis[0], "blockIdx.x")
        s.bind(s.split(Y.axis[1], 32)[1], "threadIdx.x")
        for R in (M, V):
            s.compute_at(R, Y, Y.axis[0])
            ko, ki = s.split(R.reduce_axis[0], 2048)
            s.reorder(ki, ko)
            s.bind(ki, "threadIdx.x")
    _, first = inspect.getsourcelines(sched)
    with pytest.raises(ScheduleError, match=r"2048 threads is over .*\(loop k_i of M over "
                       r"2048 bound to threadIdx.x; loop k_i of V over 2048 bound to "
                       r"threadIdx.x; loop j_i over 32 bound to threadIdx.x\)") as e:
        pipeline.build(lowered(moments, [f32(3, 4096)], schedule=sched), GPU)
    assert e.value.loc.lineno == first + 8

    def split_j(s, cfg):
        i, j = s["C"].axis
        s.bind(i, "blockIdx.x")
        s.bind(s.split(j, 2048)[1], "threadIdx.x")
    _, first = inspect.getsourcelines(split_j)
    with pytest.raises(ScheduleError, match=r"\(loop j_i over 2048 bound to threadIdx.x\)") \
            as e:
        pipeline.build(lowered(axpy, [f32(4, 4096)] * 2, schedule=split_j), GPU)
    assert e.value.loc.lineno == first + 3


@jd.compute
def reversed_exp(X):
    """E = exp(X), which Y reads along its rows backwards (a block of E per Y row)."""
    n, m = X.shape
    E = jd.tensor((n, m), lambda i, j: jd.exp(X[i, j]), name="E")
    return jd.tensor((n, m), lambda i, j: E[i, m - 1 - j] * 2.0, name="Y")


def test_a_block_over_the_thread_limit_points_at_the_bind_of_a_block_loop():
    """E computed at Y's row loop, E's 2000 columns bound to threadIdx.x: the message
    names E's loop `j_r` (the block's loop of E's axis j) first, but pointed at Y's bind
    of j.i, since the bind of E's axis j was not found as `j_r`."""
    import inspect

    def sched(s, cfg):
        Y, E = s["Y"], s["E"]
        s.bind(Y.axis[0], "blockIdx.x")
        s.bind(s.split(Y.axis[1], 32)[1], "threadIdx.x")
        s.compute_at(E, Y, Y.axis[0])
        s.bind(E.axis[1], "threadIdx.x")
    _, first = inspect.getsourcelines(sched)
    with pytest.raises(ScheduleError, match=r"2000 threads is over .*\(loop j_r over 2000 "
                       r"bound to threadIdx.x; loop j_i over 32") as e:
        pipeline.build(lowered(reversed_exp, [f32(2, 2000)], schedule=sched), GPU)
    assert e.value.loc.lineno == first + 5


def test_a_thread_loop_inside_a_loop_bound_to_the_same_index_is_refused():
    """P[i, j] (a sum over k) computed at Y's loop j.i bound to threadIdx.x, P's k.i bound
    to threadIdx.x too: thread t ran step t of both, so the threads' parts of different
    outputs were combined (wrong sums, with a 32-divisible j as with a tail; the tail's
    refusal became that wrong answer when idle threads joined the reductions). It is
    refused at the inner bind; a stage that does not read the outer loop's index (a row
    mean computed there) still builds."""
    import inspect

    @jd.compute
    def sums_at_threads(X):
        n, m, r = X.shape
        k = jd.reduce_axis(r, name="k")
        P = jd.tensor((n, m), lambda i, j: jd.sum(X[i, j, k], axis=k), name="P")
        return jd.tensor((n, m), lambda i, j: P[i, j] * 2, name="Y")

    def at_threads(s, cfg):
        Y, P = s["Y"], s["P"]
        i, j = Y.axis
        jo, ji = s.split(j, 32)
        s.bind(i, "blockIdx.x")
        s.bind(ji, "threadIdx.x")
        s.compute_at(P, Y, ji)
        ko, ki = s.split(P.reduce_axis[0], 32)
        s.reorder(ki, ko)
        s.bind(ki, "threadIdx.x")
    _, first = inspect.getsourcelines(at_threads)
    for m in (64, 40):
        low = lowered(sums_at_threads, [f32(3, m, 64)], schedule=at_threads)
        with pytest.raises(ScheduleError, match=r"loop k_i is bound to threadIdx.x inside "
                           r"loop j_i, bound to threadIdx.x too, and reads it") as e:
            pipeline.build(low, GPU)
        assert (e.value.loc.filename, e.value.loc.lineno) == (__file__, first + 9)

    x = f32(5, 70)
    got, low = run_on_cpu(centered, x, schedule=mean_at_threads(32))
    x64 = x.astype(np.float64)
    close(got, x64 - x64.sum(1, keepdims=True))
    assert "__shfl_down_sync" in pipeline.build(low, GPU).texts["cuda"]


def test_a_reduction_across_threads_under_a_guard_along_its_own_index_is_refused():
    """A row sum M computed at Y's j.i, bound to threadIdx.x over 16 of a block of 32
    (M's k.i takes 32): the threads past j.i's 16 joined M's reduction with the identity
    instead of their parts of the row (sums off by about 0.07 on 3x70, on the emulator).
    The guard stays around a reduction along the index it reads, and it is refused as
    before; guards along another index (rows on threadIdx.y) still sink."""
    low = lowered(centered, [f32(3, 70)], schedule=mean_at_threads(16))
    with pytest.raises(ScheduleError, match=r"the reduction of M_acc across threads is under "
                       r"a condition that differs between threads \(the condition "
                       r"\(j_i < 16\)\)"):
        pipeline.build(low, GPU)


def test_gpu_limits_are_schedule_errors_at_the_users_line():
    """A user's GPU schedule that the device cannot run is a ScheduleError, as the CPU
    primitives' errors are (and a CompileError, as it was), pointing at the schedule's
    line that chose it: the bind of the loop over the limit, the compute_at of the copy
    over the shared memory; from the public API, on a machine without a GPU."""
    import inspect

    @jd.compute
    def add2(A, B):
        return A + B

    @jd.schedule(add2, target="cuda")
    def too_wide(s, cfg):
        i, j = s[list(s.stages)[-1]].axis
        s.bind(i, "blockIdx.x")
        s.bind(j, "threadIdx.x")            # 2048 threads: over 1024
    a = f32(4, 2048)
    with pytest.raises(ScheduleError, match="2048 threads is over") as e:
        add2.cuda_source(a, a)
    assert isinstance(e.value, CompileError)
    lines, first = inspect.getsourcelines(too_wide)
    assert e.value.loc.filename == __file__
    assert e.value.loc.lineno == first + 4
    assert 's.bind(j, "threadIdx.x")' in str(e.value)
    b = f32(4, 512)                         # within the limits: it compiles
    assert "__global__" in add2.cuda_source(b, b)

    @jd.compute
    def rowsum2(X):
        k = jd.reduce_axis(X.shape[1], name="k")
        return jd.tensor(X.shape[:1], lambda i: jd.sum(X[i, k], axis=k), name="S")

    jd.schedule(rowsum2, target="cuda")(_row_in_shared)
    with pytest.raises(ScheduleError, match="80000 bytes of shared memory") as e:
        rowsum2.cuda_source(f32(4, 20000))        # a row of 20000 floats: 80000 bytes
    lines, first = inspect.getsourcelines(_row_in_shared)
    assert e.value.loc.lineno == first + 7, e.value     # its compute_at


def test_a_producer_fused_into_matmul_rows_keeps_the_tiles():
    """linear(gelu(linear(X))): the row fusion computed gelu at the second matmul's rows,
    and the tiling's split of those rows failed the "full" level."""
    @jd.compute
    def mlp(X, W1, W2):
        return nn.linear(nn.gelu(nn.linear(X, W1)), W2)
    x, w1, w2 = f32(32, 64), f32(128, 64), f32(64, 128)
    got, low = run_on_cpu(mlp, x, w1, w2, level="full")
    h = x.astype(np.float64) @ w1.T
    from math import erf
    h = h * 0.5 * (1 + np.vectorize(erf)(h / np.sqrt(2)))
    close(got, h @ w2.T, rtol=1e-4, atol=1e-4)
    assert str(low.func).count("(shared)") >= 4          # both matmuls tiled


def test_config_space_of_another_target():
    """config_space(target="cuda") on NumPy arrays lists the GPU schedule's knobs (the
    tile sizes), on a machine without a GPU; the CPU's space is the arguments' own."""
    a = f32(256, 256)
    gpu = matmul.config_space(a, a, target="cuda")
    assert {"C.tm", "C.tn", "C.bk"} <= set(gpu.knobs)
    assert set(matmul.config_space(a, a).knobs) != set(gpu.knobs)
    assert set(matmul.config_space(a, a, target="cpu").knobs) == \
        set(matmul.config_space(a, a).knobs)


def test_config_space_of_a_definition_with_a_target_parameter():
    """A definition's own parameter named `target` takes config_space's target= (None
    too); the space is then the arguments' own target's."""
    f = jd.compute(static=("target",))(lambda A, B, target: A + B)
    a = f32(8, 8)
    assert len(f.config_space(a, a, target=None)) == len(f.config_space(a, a, None))


def test_a_gpu_schedule_that_leaves_a_stage_on_one_thread_warns_at_the_users_line():
    """A schedule that splits a stage's loops but binds none runs it as one thread's loop
    nest (a <<<1, 1>>> kernel: correct, and hundreds of times slower than the GPU): a
    PerformanceWarning names the stage, at the user's call. Binding it, or a stage of a
    few steps (a 0-d result), does not warn."""
    import warnings
    from jitdl.errors import PerformanceWarning

    def scale(X):
        return jd.tensor(X.shape, lambda i, j: X[i, j] * 2, name="Y")

    def forgot(s, cfg):
        s.split(s["Y"].axis[0], 32)

    def bound(s, cfg):
        i, j = s["Y"].axis
        s.bind(i, "blockIdx.x")
        s.bind(j, "threadIdx.x")

    def small(s, cfg):
        s.split(s["Y"].axis[0], 2)

    def stored(s, cfg):         # (only where it is computed: the grid-stride loop)
        s.compute_root(s["Y"])

    for schedule, shape, warns in ((forgot, (300, 200), True), (bound, (300, 200), False),
                                   (small, (4, 3), False), (stored, (300, 200), False)):
        f = jd.compute(scale)
        jd.schedule(f, target="cuda")(schedule)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            src = f.cuda_source(f32(*shape))
        idle = [w for w in seen if w.category is PerformanceWarning]
        assert len(idle) == warns, [str(w.message) for w in seen]
        assert ("<<<(1, 1, 1), (1, 1, 1)>>>" in src) == (schedule in (forgot, small))
        if warns:
            assert "stage Y on one GPU thread" in str(idle[0].message)
            assert idle[0].filename == __file__, idle[0].filename


@pytest.mark.parametrize("op, shape, pays", [
    (lambda x: jnp.sum(x, axis=0), (100000, 64), True),     # few columns, long: split
    (lambda x: jnp.sum(x, axis=0), (40, 100000), False),    # columns fill the GPU
    (lambda x: jnp.sum(x, axis=1), (300, 1000), True),      # rows for a block each
    (lambda x: jnp.sum(x, axis=1), (100000, 20), False),    # short rows: a thread each
    (lambda x: jnp.sum(x), (1000, 1000), False),            # one output: split anyway
    (lambda x: jnp.sum(x, axis=1), (20, 200), False),       # small: not worth a compile
    (lambda x: jnp.exp(x) + 1, (1000, 1000), False),        # no reduction
    (lambda x: nn.softmax(x, dim=-1), (64, 4096), True),
    (lambda x: jnp.argmax(x, axis=0), (100000, 64), True)])  # (two column reductions)
def test_which_gpu_op_calls_compile_for_their_shapes(op, shape, pays):
    """schedule.gpu.plans on the op traced with fixed shapes: reductions whose GPU
    schedule needs the shapes (a split of few outputs, a block per long row), on arrays
    large enough to repay a compilation."""
    from jitdl.schedule.gpu import plans
    f = jd.compute(op)
    graph, _ = f._graph((np.empty(shape, np.float32),))
    for sms in (16, 132):
        assert bool(plans(graph, CUDA(multiprocessors=sms))) == pays, sms


def test_column_splits_read_down_columns_and_fill_one_wave():
    """Found by review: a column reduction over several axes is split by the whole
    reduction's length, not its longest axis's alone ((64, 1024, 64): 16 blocks, now
    the 2-d case's 1024 parts); parts fill one wave of the grid (600 columns: a second
    pass of a few threads after the full grid); a row reduction that also reads a row's
    statistic (argmax's second stage reads m[i]) is no column reduction."""
    from jitdl.schedule import gpu
    target = CUDA()
    full = target.multiprocessors * gpu._WAVES * target.threads_per_block

    def plans(op, shape):
        s = gpu.Schedule(jd.compute(op)._graph((np.empty(shape, np.float32),))[0])
        return [gpu._split_plan(s, n, target) for n, st in s.stages.items() if st.is_reduce]
    (plan,) = plans(lambda X: jnp.sum(X, axis=(0, 1)), (64, 1024, 64))
    assert plan[2:4] == (1024, True) and plan[4] == ()
    (plan,) = plans(lambda X: jnp.sum(X, axis=0), (10 ** 6, 600))
    assert plan[3] and plan[2] * 600 <= full
    src = jd.compute(lambda X: jnp.sum(X, axis=0)).cuda_source(
        np.empty((10 ** 6, 600), np.float32))
    first = src.split("__global__")[1]
    assert "_o_o <" not in first, first[:600]       # (no second pass of the grid)
    for plan in plans(lambda X: jnp.argmax(X, axis=1), (64, 100000)):
        assert plan is None or not plan[3], plan
    # (a second review: w @ X reads w[k], which walks no column, and X down its columns)
    s = gpu.Schedule(jd.compute(lambda w, X: jnp.dot(w, X))._graph(
        (np.empty(100000, np.float32), np.empty((100000, 512), np.float32)))[0])
    (plan,) = [gpu._split_plan(s, n, target) for n, st in s.stages.items() if st.is_reduce]
    assert plan is not None and plan[3], plan
    for op in (lambda A, B: jnp.matmul(A, B), lambda A, B: jnp.dot(B.T, A.T)):
        s = gpu.Schedule(jd.compute(op)._graph((f32(64, 4096), f32(4096, 64)))[0])
        for n, st in s.stages.items():
            if st.is_reduce:
                assert not gpu._column_like(st), n


def test_no_performance_warning_for_a_stage_the_schedule_leaves_alone():
    """Found by review: a 0-d reduction the schedule does not touch (bind_unbound has no
    data loop to bind) was named in the PerformanceWarning as one the schedule worked on."""
    import warnings
    from jitdl.errors import PerformanceWarning

    def two(X):
        Y = jd.tensor(X.shape, lambda i, j: X[i, j] * 2, name="Y")
        k, m = jd.reduce_axis(X.shape[0]), jd.reduce_axis(X.shape[1])
        return Y, jd.tensor((), lambda: jd.sum(X[k, m], axis=[k, m]), name="S")

    def sched(s, cfg):
        i, j = s["Y"].axis
        s.bind(i, "blockIdx.x")
        s.bind(j, "threadIdx.x")
    f = jd.compute(two)
    jd.schedule(f, target="cuda")(sched)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        src = f.cuda_source(f32(3000, 1000))
    assert not [w for w in seen if w.category is PerformanceWarning], \
        [str(w.message) for w in seen]
    # (and the whole sum S, untouched, is split over the GPU as the automatic schedule
    # splits it: it ran on one thread, found by a second review)
    launches = [ln for ln in src.splitlines() if ln.startswith("//   jd_")]
    assert len(launches) == 3 and "<<<(1, 1, 1), (1, 1, 1)>>>" not in src, launches

    # a schedule that only reads through a cache leaves its readers' loops as they are:
    # all of them get the grid-stride loop, and no warning
    def ab(X):
        return (jd.tensor(X.shape, lambda i, j: X[i, j] * 2, name="A"),
                jd.tensor(X.shape, lambda i, j: X[i, j] + 1, name="B"))

    def cached(s, cfg):
        s.cache_read("X", [s["A"], s["B"]], "global")
    g = jd.compute(ab)
    jd.schedule(g, target="cuda")(cached)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        src = g.cuda_source(f32(300, 200))
    assert not [w for w in seen if w.category is PerformanceWarning]
    assert "<<<(1, 1, 1), (1, 1, 1)>>>" not in src


@pytest.mark.parametrize("when", ["after", "before"])
def test_binding_a_shared_copys_loops_says_its_threads_fill_it_already(when):
    """TVM's tutorial binds the split loops of its shared copies to threadIdx (cooperative
    fetching); jitdl shares every shared copy's loops out over the block's threads. The
    bind was refused as "they can be ... split ... but not fused or bound", which did
    not say that: it now says to leave them unbound, at the user's bind, and the
    schedule without the binds runs (tests/test_cuda_emulated.py)."""
    import inspect
    from test_cuda_codegen import tvm_tutorial_schedule

    def sched(s, cfg):
        A = s.cache_read("A", [s["C"]], "shared")
        ty, _ = s.split(A.axis[0], nparts=8)
        if when == "before":
            s.bind(ty, "threadIdx.y")
        s.compute_at(A, s["C"], s.split(s["C"].reduce_axis[0], 8)[0])
        if when == "after":
            s.bind(ty, "threadIdx.y")
    _, first = inspect.getsourcelines(sched)
    with pytest.raises(ScheduleError, match=r"^bind: A_cache is a shared copy computed at "
                       r"loop k.o of C; the block's threads fill it together already .* so "
                       r"leave them unbound") as e:
        lowered(matmul, [f32(64, 48), f32(48, 96)], schedule=sched)
    assert e.value.loc.lineno == first + (4 if when == "before" else 7)     # (the bind)
    lowered(matmul, [f32(64, 48), f32(48, 96)], schedule=tvm_tutorial_schedule)


def test_a_shared_copy_read_from_inside_a_stage_computed_at_its_loop_is_refused_clearly():
    """A's shared copy computed at C's block loop, its register copy at k.i of C's local
    cache, which is computed at C's thread loop (inside the block loop): the refusal said
    the register copy "also reads A_cache outside loop j.o of C", where it is inside it.
    It now says from inside which stage, and to compute the copy at a loop of that stage
    (as the TVM tutorial does: tests/test_cuda_emulated.py)."""
    import inspect

    def sched(s, cfg):
        C = s["C"]
        CL = s.cache_write(C)
        AA = s.cache_read("A", [CL], "shared")
        AL = s.cache_read(AA, [CL], "local")
        by, yi = s.split(C.axis[0], 32)
        bx, xi = s.split(C.axis[1], 32)
        ty, yi = s.split(yi, 4)
        tx, xi = s.split(xi, 4)
        s.reorder(by, bx, ty, tx, yi, xi)
        for ax, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"),
                        (tx, "threadIdx.x")):
            s.bind(ax, tag)
        s.compute_at(CL, C, tx)
        ko, ki = s.split(CL.reduce_axis[0], 8)
        s.reorder(ko, ki, *CL.axis)
        s.compute_at(AA, C, bx)
        s.compute_at(AL, CL, ki)
    _, first = inspect.getsourcelines(sched)
    with pytest.raises(ScheduleError, match=r"^compute_at: A_cache_cache reads A_cache from "
                       r"inside C_local, which is computed at loop j.i.o of C: .* compute "
                       r"A_cache at a loop of C_local \(nested compute_at\)") as e:
        lowered(matmul, [f32(64, 64), f32(64, 64)], schedule=sched)
    assert e.value.loc.lineno == first + 16


@pytest.mark.parametrize("case", ["whole_buffer", "local_copy"])
def test_a_bound_loop_of_a_block_that_cannot_be_shared_is_refused(case):
    """A stage computed at a loop whose data loop is bound to threadIdx.x (before or after
    the compute_at): its block is shared by the GPU block's threads (test_cuda_emulated),
    which a stage kept in its whole buffer (each thread wrote its part of it, the others
    read it with no barrier) or a per-thread ("local") copy cannot be: refused at the
    bind."""
    import inspect

    def sched(s, cfg):
        Y, E = s["Y"], s["E"]
        s.bind(Y.axis[0], "blockIdx.x")
        s.bind(s.split(Y.axis[1], 32)[1], "threadIdx.x")
        if case == "whole_buffer":
            s.compute_at(E, Y, Y.axis[0], block_buffer=False)
            s.bind(E.axis[1], "threadIdx.x")
        else:
            s.compute_at(E, Y, Y.axis[0])
            c = s.cache_read("X", [E], "local")
            s.bind(c.axis[1], "threadIdx.x")
            s.compute_at(c, Y, Y.axis[0])
    _, first = inspect.getsourcelines(sched)
    what = ("E.j", "kept in its whole buffer") if case == "whole_buffer" else \
        ("X_cache.d1", 'a per-thread \\("local"\\) copy')
    with pytest.raises(ScheduleError, match=rf"^bind: {what[0]} is bound to threadIdx.x, and "
                       rf".* needs the block in shared memory, but it is {what[1]}"):
        lowered(reversed_exp, [f32(4, 100)], schedule=sched)
    with pytest.raises(ScheduleError) as e:
        lowered(reversed_exp, [f32(4, 100)], schedule=sched)
    assert e.value.loc.lineno == first + (6 if case == "whole_buffer" else 10)
