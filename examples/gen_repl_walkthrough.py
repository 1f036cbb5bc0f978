"""Generate examples/repl_walkthrough.md from a real session (run from the repo root)."""
import code, io, contextlib, sys
steps = [
 ("Define a kernel in index notation (from a file or an IPython/Jupyter cell):", None),
 (None, '''import numpy as np, jitdl as jd
@jd.compute
def layernorm(X, eps):
    n, m = X.shape
    mu[i] = sum(X[i, k] for k in range(m)) / m
    var[i] = sum((X[i, k] - mu[i]) ** 2 for k in range(m)) / m
    Y[i, j] = (X[i, j] - mu[i]) * rsqrt(var[i] + eps)
    return Y'''),
 ("Call it: the first call for a shape captures, checks, lowers and compiles; `eps` is a Python float, so it is a runtime argument and a *weak* scalar: the result stays float32.", None),
 (None, "x = np.random.default_rng(0).standard_normal((256, 512)).astype(np.float32)"),
 (None, "y = layernorm(x, 1e-5); y.dtype, y.shape"),
 (None, "ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5); float(abs(y - ref).max())"),
 ("The function remembers its compiled specialisations (one per shapes/dtypes):", None),
 (None, "layernorm"),
 ("`lower` shows the loop IR that the automatic schedule produced: the two row sums (`mu` and `var` divide sums, so the sums became stages of their own) are computed inside the parallel row loop, into one-element local buffers, so each row is read from memory once; the elementwise stages are inlined and the inner loop is vectorised:", None),
 (None, "layernorm.lower(x, 1e-5)"),
 ("The schedule is data: a list of steps, replayable and hashable.", None),
 (None, "layernorm.schedule_of(x, 1e-5)"),
 (None, "layernorm.schedule_of(x, 1e-5).steps"),
 ("The optimised LLVM IR and the assembly are there too (here: the AVX-512 reduction of the mean):", None),
 (None, "ir = layernorm.llvm_ir(x, 1e-5); print([l.strip() for l in ir.splitlines() if 'fadd reassoc' in l][0][:90])"),
 (None, "asm = layernorm.asm(x, 1e-5); print(sum('zmm' in l for l in asm.splitlines()), 'lines use zmm registers')"),
 ("Time it (median of repeats after a warm-up), next to NumPy:", None),
 (None, "t = layernorm.timeit(x, 1e-5); print(f'{t * 1e6:.0f} us')"),
 (None, "import timeit; tn = min(timeit.repeat(lambda: (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5), number=20, repeat=5)) / 20; print(f'numpy {tn * 1e6:.0f} us')"),
 ("Mistakes are reported against your source line. An access that can leave its tensor is refused before anything runs:", None),
 (None, '''@jd.compute
def shift(X):
    return jd.tensor(X.shape, lambda i: X[i + 1], name="Y")'''),
 (None, "shift(np.ones(8))"),
 ("Arguments that disagree with the definition name both arguments and sizes:", None),
 (None, '''@jd.compute
def matmul(A, B):
    (M, K), (_, N) = A.shape, B.shape
    k = jd.reduce_axis(K, name="k")
    return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")'''),
 (None, "matmul(np.ones((4, 5)), np.ones((6, 3)))"),
 ("Data-dependent indices cannot be proven, so they are checked at run time (marked `!` in the IR):", None),
 (None, '''@jd.compute
def gather(E, ids):
    Y[i, j] = E[ids[i], j]
    return Y'''),
 (None, "print(gather.lower(np.ones((10, 4)), np.array([1, 2])))"),
 (None, "gather(np.ones((10, 4)), np.array([1, 12]))"),
]
import os, tempfile, importlib.util
# functions need their source: run the session from a real file, one step at a time
out = ["# jitdl in the REPL: a walk-through", "",
       "Generated from a real session by running each step in turn (see the end of this file for how).",
       "In the plain `python` prompt, TE-style definitions (`jd.tensor(shape, lambda ...)`) work by",
       "tracing; index notation needs the function's source, which IPython/Jupyter cells and files keep.", ""]
ns = {}
src_file = tempfile.NamedTemporaryFile("w", suffix="_session.py", delete=False)
lines_so_far = ""
for text, stmt in steps:
    if text:
        out += [text, ""]
        continue
    # append the statement to a file so that inspect.getsource works
    start = lines_so_far.count("\n")
    lines_so_far += stmt + "\n"
    with open(src_file.name, "w") as f:
        f.write(lines_so_far)
    import linecache; linecache.checkcache(src_file.name)
    buf = io.StringIO()
    shown = "\n".join((">>> " if n == 0 else "... ") + l for n, l in enumerate(stmt.splitlines()))
    try:
        tree = compile("\n" * start + stmt, src_file.name, "single" if "\n" not in stmt and not stmt.startswith("@") else "exec")
        with contextlib.redirect_stdout(buf):
            if "\n" in stmt or stmt.startswith("@"):
                exec(tree, ns)
            else:
                ns["__builtins__"] = __builtins__
                sys.displayhook = lambda v: (v is not None) and print(repr(v))
                exec(tree, ns)
    except Exception as e:
        buf.write("Traceback (most recent call last):\n  ...\n" + f"{type(e).__module__}.{type(e).__name__}: {e}\n".replace("builtins.", ""))
    res = buf.getvalue().replace(src_file.name, "<session>.py").rstrip()
    out += ["```pycon", shown + ("\n" + res if res else ""), "```", ""]
out += ["---", "Regenerate with `python examples/gen_repl_walkthrough.py > examples/repl_walkthrough.md` (figures vary by machine)."]
print("\n".join(out))
