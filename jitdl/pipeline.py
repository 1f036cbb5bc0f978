"""The compile pipeline: TE graph + schedule + target + options -> compiled artefact.

Pure: it reads no cache, writes no file and keeps no state, so a tuning worker in a
spawned process runs it as the decorator does. Its passes, in order:

    schedule         the user's schedule function with a config, recorded steps, or
                     the target's automatic schedule -> a Schedule (the automatic one
                     is checked by lowering it, and falls back to fewer decisions when
                     that fails: a user never sees an error about a schedule they did
                     not write)
    lower            bounds and shape checks, loop nests -> loop IR
    simplify         canonical arithmetic, decided guards, // and % by constants
    partition_loops  guard-free main parts and tails of non-dividing splits
    simplify_tails   simplify again, inside the new tails
    verify           loop-IR invariants
    codegen          loop IR -> LLVM IR (cpu), or CUDA C kernels and their launches (cuda)
    optimize         LLVM's O3 pipeline for the target, object code (cpu; a CUDA
                     source is compiled to a cubin by jitdl.runtime.cuda, with NVRTC)

`lower()` runs up to verify, `build()` the rest, `compile()` both; `until=` stops after
the named pass, and every loop-IR stage's text is kept when `texts=True` (the LLVM
stages' texts are always kept, as llvm_ir_unoptimized and llvm_ir).
"""
from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from jitdl.codegen import cuda as cuda_codegen
from jitdl.codegen.llvm import collector_paused, direct_int_bounds, direct_shapes, generate
from jitdl.errors import (ArgumentError, CompileError, GPUScheduleError, PerformanceWarning,
                          ScheduleError, warn)
from jitdl import dtypes
from jitdl.ir import weak
from jitdl.ir.nodes import BinOp, Binary, Cast, Const, Var
from jitdl.ir.printer import expr_text
from jitdl.lower.lower import in_place_inputs, layout_free, lower as lower_nests
from jitdl.runtime import engine
from jitdl.runtime.kernel import Signature
from jitdl.schedule.config import Config
from jitdl.schedule.gpu import bind_unbound, one_thread_stages
from jitdl.schedule.schedule import Schedule
from jitdl.target import get as get_target
from jitdl.tir.partition import partition_loops
from jitdl.tir.simplify import simplify
from jitdl.tir.verify import verify

LOOP_PASSES = ("schedule", "lower", "simplify", "partition_loops", "simplify_tails",
               "verify")
BUILD_PASSES = ("codegen", "optimize")
PASSES = LOOP_PASSES + BUILD_PASSES

# the loop-IR passes after "lower", each PrimFunc -> PrimFunc
_TIR = {"simplify": simplify, "partition_loops": partition_loops,
        "simplify_tails": simplify}

log = logging.getLogger("jitdl.schedule")


@dataclass(frozen=True)
class Options:
    """What besides the graph, the schedule and the target decides the binary."""
    name: str = "kernel"          # the user's name for messages; the symbol is derived
    strict_fp: bool = False       # keep sequential floating-point order in reductions
    num_threads: int = 1          # threads the automatic schedule plans parallel loops for
    parallel: bool | None = None  # emit parallel loops (None: when libgomp is there)
    # ((argument position, dimension), ...) of the symbolic sizes that may be 1 (dimensions
    # the definition never broadcasts: runtime.kernel.shape_key's `solid`); the others
    # are never 1, and the `.direct` entry refuses a call where one is (its own kernel)
    ones: tuple = ()

    @property
    def symbol(self):
        """The kernel's symbol: prefixed, so that a definition called `free` or `tanhf`
        does not take the place of the C function that the generated code calls."""
        return "jd_" + "".join(c if c.isalnum() or c == "_" else "_" for c in self.name)


@dataclass
class Lowered:
    """The pipeline up to loop IR: the schedule, the PrimFunc and its buffers."""
    graph: object
    schedule: Schedule
    config: Config | None
    func: object                  # PrimFunc after the last pass run
    inputs: list
    outputs: list
    scalars: list
    checks: int
    sizes: list = field(default_factory=list)    # (size Var, argument, dim): last scalars
    agree: list = field(default_factory=list)    # symbolic sizes checked equal at a call
    required: list = field(default_factory=list)  # conditions on the sizes checked at a call
    texts: dict = field(default_factory=dict)    # pass name -> text after it
    times: dict = field(default_factory=dict)    # pass name -> seconds
    funcs: dict = field(default_factory=dict)    # pass name -> PrimFunc after it
    auto_level: str | None = None   # the automatic schedule's level used (None: not automatic)
    # (PrimFunc, CUDA module, seconds) of the automatic schedule's check (_auto_level)
    cuda_module: tuple | None = field(default=None, repr=False, compare=False)
    _printed: tuple = field(default=(None, None), repr=False, compare=False)

    @property
    def loop_ir(self):
        """The text of the PrimFunc, printed once per PrimFunc (the cache key and the
        kernel's texts both need it)."""
        func, text = self._printed
        if func is not self.func:
            with _not_too_deep(self.graph):
                text = str(self.func)
            self._printed = (self.func, text)
        return text

    @property
    def space(self):
        """The config space the schedule declared (empty for recorded steps)."""
        return self.config.space if self.config is not None else None


@dataclass
class Artifact:
    """A compiled kernel as data: object code, signature, and the texts of its stages."""
    signature: Signature
    obj: bytes
    texts: dict                   # loop_ir, llvm_ir_unoptimized, llvm_ir (+ per pass)
    steps: list                   # the schedule's steps (JSON)
    config: dict | None           # the knob values the schedule used
    times: dict                   # pass name -> seconds
    launch: dict | None = None    # cuda: the kernels, their launches and intermediates


def _check_until(until):
    if until is not None and until not in PASSES:
        raise ArgumentError(f"no pass named {until!r}; the passes: {', '.join(PASSES)}")


def schedule(graph, target, options=Options(), steps=None, schedule_fn=None, config=None):
    """The schedule of a graph: steps replayed, a schedule function run with `config`,
    or (neither given) the target's automatic schedule with `config` for its knobs, at
    its first level that lowers (see _automatic). Returns (Schedule, Config or None)."""
    done = _schedule(graph, get_target(target), options, steps, schedule_fn, config)
    return done.schedule, done.config


@dataclass
class _Scheduled:
    schedule: Schedule
    config: Config | None
    nests: object = None          # the loop nests, when scheduling lowered them already
    lower_s: float = 0.0          # seconds that lowering took
    level: str | None = None      # the automatic schedule's level
    # what checking a cuda level ran already, for _lower and _build_cuda to take instead
    # of running it again: pass name -> (PrimFunc before, PrimFunc after, seconds), and
    # "codegen" -> (PrimFunc, CUDA module, seconds)
    done: dict = field(default_factory=dict)


def _schedule(graph, target, options, steps, schedule_fn, config):
    sched = Schedule(graph)
    if steps is not None:
        return _Scheduled(sched.replay(steps), None)
    if schedule_fn is not None:
        cfg = Config(config, sched)
        schedule_fn(sched, cfg)
        if target.name == "cuda":
            bound = bind_unbound(sched, target)
            if bound:
                log.debug("%s: stages the schedule leaves unbound, as grid-stride loops: "
                          "%s", options.name, ", ".join(bound))
            idle = one_thread_stages(sched, target)
            if idle:
                many = len(idle) > 1
                warn(f"jitdl: {options.name}: the schedule for target 'cuda' leaves "
                     f"stage{'s' if many else ''} {', '.join(idle)} on one GPU thread: "
                     f"it works on {'them' if many else 'it'} but binds none of "
                     f"{'their' if many else 'its'} loops to blocks or threads; bind "
                     f"them (s.bind(loop, \"blockIdx.x\"), s.bind(loop, \"threadIdx.x\")), "
                     f"or leave a stage untouched for the automatic grid-stride loop",
                     PerformanceWarning)
        return _Scheduled(sched, cfg)
    return _automatic(graph, target, options, config)


def _automatic(graph, target, options, config):
    """The target's automatic schedule at its first level (all its decisions, then fewer
    step by step, down to the definition's own loop nests) whose steps apply and lower:
    an automatic schedule that fails its own checks is never the user's error. The
    schedule, its knobs and its recorded steps are those of the level used, so replaying
    its steps or its config gives the same kernel. An error of another kind is the
    definition's when the default loop nests (the last level) fail too: that error is
    raised; else it came from the schedule, and the next level is tried. Each fallback is
    a debug note on the "jitdl.schedule" logger (JITDL_LOG=schedule)."""
    levels = target.auto_levels
    last = len(levels) - 1
    plain = None
    for level in range(last):
        try:
            return _auto_level(graph, target, options, config, level)
        except Exception as e:        # noqa: BLE001 - any failure of our own schedule
            failure = e
        if not isinstance(failure, ScheduleError) and plain is None:
            # (outside the except clause: the definition's own error, raised unchained)
            plain = _auto_level(graph, target, options, config, last)
        log.debug("%s: the automatic schedule (%s) failed: %s: %s; trying: %s",
                  options.name, levels[level], type(failure).__name__,
                  (str(failure).splitlines() or [""])[0], levels[level + 1])
    return plain if plain is not None else _auto_level(graph, target, options, config, last)


def _auto_level(graph, target, options, config, level):
    sched = Schedule(graph)
    cfg = Config(config, sched)
    target.auto_schedule(sched, cfg, options.num_threads, level)
    t0 = time.perf_counter()
    nests = lower_nests(graph, sched, options.symbol, target.local_buffer_bytes)
    lower_s = time.perf_counter() - t0
    done = {}
    if target.name == "cuda" and level < len(target.auto_levels) - 1:
        # what only code generation checks (launch limits, barriers every thread reaches,
        # shared memory) is checked here too: the automatic schedule then falls back. The
        # passes' and the code generator's results are kept: lower() and build() take
        # them instead of running them again (their second run was 35-40% of a cold
        # cuda_source)
        func = nests.func
        for name in LOOP_PASSES[2:-1]:
            t0 = time.perf_counter()
            after = _run_pass(name, func, target)
            done[name] = (func, after, time.perf_counter() - t0)
            func = after
        t0 = time.perf_counter()
        try:
            mod = cuda_codegen.generate(func, target)
        except CompileError as e:
            raise ScheduleError(f"the CUDA code of this schedule: {e}") from None
        done["codegen"] = (func, mod, time.perf_counter() - t0)
    return _Scheduled(sched, cfg, nests, lower_s, target.auto_levels[level], done)


def _run_pass(name, func, target):
    """A loop-IR pass after "lower" and before "verify" on `func`."""
    if name == "partition_loops":
        return partition_loops(func, target.parallel_min_work)
    return _TIR[name](func)


@contextmanager
def _not_too_deep(graph):
    """A RecursionError of a pass is the DefinitionError of too deep an expression."""
    try:
        yield
    except RecursionError:
        from jitdl.capture.trace import too_deep
        raise too_deep(graph) from None


def lower(graph, target, options=Options(), steps=None, schedule_fn=None, config=None,
          until=None, texts=False) -> Lowered:
    """Run the loop-IR passes (schedule ... verify), or up to `until`."""
    with _not_too_deep(graph):
        return _lower(graph, target, options, steps, schedule_fn, config, until, texts)


def _lower(graph, target, options, steps, schedule_fn, config, until, texts):
    _check_until(until)
    target = get_target(target)
    times, kept = {}, {}
    t0 = time.perf_counter()
    done = _schedule(graph, target, options, steps, schedule_fn, config)
    sched, cfg = done.schedule, done.config
    times["schedule"] = time.perf_counter() - t0 - done.lower_s - sum(
        seconds for _, _, seconds in done.done.values())
    if texts:
        kept["schedule"] = repr(sched)
    low = Lowered(graph, sched, cfg, None, [], [], [], 0, texts=kept, times=times,
                  auto_level=done.level, cuda_module=done.done.get("codegen"))
    if until == "schedule":
        return low
    t0 = time.perf_counter()
    nests = done.nests
    if nests is None:
        nests = lower_nests(graph, sched, options.symbol, target.local_buffer_bytes)
    times["lower"] = time.perf_counter() - t0 + done.lower_s
    low.func, low.inputs, low.outputs, low.scalars, low.checks = (
        nests.func, nests.inputs, nests.outputs, nests.scalars, nests.checks)
    low.sizes, low.agree, low.required = (list(nests.sizes), list(nests.agree),
                                          list(nests.required))
    low.funcs["lower"] = low.func
    if texts:
        kept["lower"] = str(low.func)
    for name in LOOP_PASSES[2:]:
        if until is not None and PASSES.index(until) < PASSES.index(name):
            break
        t0 = time.perf_counter()
        before, after, seconds = done.done.get(name, (None, None, 0.0))
        if name == "verify":
            verify(low.func)
        elif before is low.func:                # (run while scheduling: _auto_level)
            low.func = low.funcs[name] = after
            t0 -= seconds
        else:
            low.func = low.funcs[name] = _run_pass(name, low.func, target)
        times[name] = time.perf_counter() - t0
        if texts:
            kept[name] = str(low.func)
    return low


def build(low: Lowered, target, options=Options(), until=None) -> Artifact:
    """Code generation and optimisation of a lowered function (its "verify" pass run)."""
    with _not_too_deep(low.graph):
        return _build(low, target, options, until)


def _build(low, target, options, until):
    _check_until(until)
    target = get_target(target)
    if "verify" not in low.times:
        raise ArgumentError("pipeline.build: lower() stopped before 'verify'")
    graph, times = low.graph, dict(low.times)
    texts = dict(low.texts)
    texts["loop_ir"] = texts.get("verify") or low.loop_ir
    if target.name == "cuda":          # the one branch on the target
        return _build_cuda(low, target, options, texts, times)
    if target.name != "cpu":
        raise ArgumentError(f"pipeline: no code generator for target {target.name!r}")
    parallel = engine.parallel_available() if options.parallel is None else options.parallel
    t0 = time.perf_counter()
    sizes = [v for v, _, _ in low.sizes]
    out_trees = [[size_tree(d, sizes) for d in b.shape] for b in low.outputs]
    required, int_checks = host_checks(low)
    # printed (and let go) with the collector still paused: the module's objects are then
    # garbage at its next collection, freed by one scan; printed after, they were alive at
    # the first collections and scanned again by the older generations' (measured: half
    # the time in collections of 16 cold jd.numpy first calls)
    with collector_paused():
        module, checks = generate(low.func, parallel_ok=parallel, strict_fp=options.strict_fp,
                                  with_err=low.checks > 0,
                                  array_data_offset=target.array_data_offset,
                                  n_inputs=len(low.inputs), layout=graph.layout,
                                  shapes=direct_shapes(low.inputs, out_trees, sizes, [
                                      k for k, (_, pos, dim) in enumerate(low.sizes)
                                      if (pos, dim) in options.ones]),
                                  alias=in_place_inputs(low.schedule, low.inputs, low.outputs),
                                  any_order=layout_free(low.schedule, low.inputs, low.outputs),
                                  int_bounds=direct_int_bounds(graph.layout, int_checks))
        texts["llvm_ir_unoptimized"] = "\n".join(filter(None, (str(module),
                                                                 module.jitdl_entries)))
        allocs, alias = module.jitdl_allocs, module.jitdl_alias
        del module
    times["codegen"] = time.perf_counter() - t0
    sig = Signature(
        options.name, low.func.name,
        [[b.name, [d if isinstance(d, int) else None for d in b.shape], b.dtype]
         for b in low.inputs],
        [[b.name, tree, b.dtype] for b, tree in zip(low.outputs, out_trees)],
        [[v.name, v.dtype] for v in low.scalars],
        [[t, text, n if isinstance(n, int) else expr_text(n)] for t, text, n in checks],
        [list(x) for x in graph.layout],
        [[n, dt, [d if isinstance(d, int) else expr_text(d) for d in shape], nb]
         for n, dt, shape, nb in allocs],
        int_checks,
        sizes=[[pos, dim] for _, pos, dim in low.sizes], agree=low.agree,
        required=required, alias=alias)
    steps = low.schedule.steps
    config = low.config.used if low.config is not None else None
    if until == "codegen":
        return Artifact(sig, b"", texts, steps, config, times)
    t0 = time.perf_counter()
    obj, optimized = engine.optimize(texts["llvm_ir_unoptimized"])
    times["optimize"] = time.perf_counter() - t0
    texts["llvm_ir"] = optimized
    return Artifact(sig, obj, texts, steps, config, times)


def _build_cuda(low, target, options, texts, times):
    """The CUDA C of a lowered function and its launch plan, as JSON: per kernel its
    parameters (["arg", k] for the function's k-th parameter, ["tmp", k] for the k-th
    intermediate), grid (size trees, see size_tree) and block; the intermediates' names,
    dtypes and shapes. NVRTC compiles the source at load time (jitdl.runtime.cuda)."""
    t0 = time.perf_counter()
    func, mod, seconds = low.cuda_module or (None, None, 0.0)
    try:
        if func is low.func:            # (generated while scheduling: _auto_level)
            t0 -= seconds
        else:
            mod = cuda_codegen.generate(low.func, target)
    except GPUScheduleError as e:
        if e.loc is not None:
            raise
        raise GPUScheduleError(e.message, _schedule_line(low.schedule, e), e.loops,
                               e.buffers) from None
    times["codegen"] = time.perf_counter() - t0
    texts["cuda"] = mod.source
    sizes = [v for v, _, _ in low.sizes]
    params = list(low.func.params)
    tmps = mod.intermediates

    def where(p):
        return ["arg", params.index(p)] if p in params else ["tmp", tmps.index(p)]
    launch = {
        "kernels": [{"name": k.name, "params": [where(p) for p in k.params],
                     "grid": [size_tree(g, sizes) for g in k.grid], "block": list(k.block),
                     "shared_bytes": k.shared_bytes, "checks": k.checks}
                    for k in mod.kernels],
        "intermediates": [[b.name, b.dtype, [size_tree(d, sizes) for d in b.shape]]
                          for b in tmps],
        "arch": target.sm,
    }
    graph = low.graph
    required, int_checks = host_checks(low)
    sig = Signature(
        options.name, low.func.name,
        [[b.name, [d if isinstance(d, int) else None for d in b.shape], b.dtype]
         for b in low.inputs],
        [[b.name, [size_tree(d, sizes) for d in b.shape], b.dtype] for b in low.outputs],
        [[v.name, v.dtype] for v in low.scalars],
        [[t, text, n if isinstance(n, int) else expr_text(n)] for t, text, n in mod.checks],
        [list(x) for x in graph.layout], [], int_checks,
        sizes=[[pos, dim] for _, pos, dim in low.sizes], agree=low.agree,
        required=required)
    config = low.config.used if low.config is not None else None
    return Artifact(sig, b"", texts, low.schedule.steps, config, times, launch)


def _schedule_line(schedule, e):
    """The user's schedule line behind a GPU kernel's refusal: the bind of a loop it
    names, the compute_at of a buffer it names (a stage's copy `X_cache_l` is stage
    X_cache's), else the schedule's first bind; None for an automatic schedule."""
    stages = schedule.stages.values()
    for name in e.loops:            # (a loop variable: `k_i` of the loop `k.i`; `j_r` of
        for st in stages:           # the loop j of a block computed at a loop: `j.r`)
            loc = next((loc for n, loc in st.kind_locs.items()
                        if (n.replace(".", "_") == name or st.attach == "at" and
                            n.replace(".", "_") + "_r" == name) and loc is not None), None)
            if loc is not None:
                return loc
    for name in e.buffers:
        owners = [st for st in stages if name == st.tensor.name
                  or name.startswith(st.tensor.name + "_")]
        for st in sorted(owners, key=lambda st: -len(st.tensor.name)):
            loc = st.attach_loc or next(iter(filter(None, st.kind_locs.values())), None)
            if loc is not None:
                return loc
    return next((loc for st in stages for loc in st.kind_locs.values() if loc is not None),
                None)


_TREE_OPS = {BinOp.ADD: "+", BinOp.SUB: "-", BinOp.MUL: "*", BinOp.FLOORDIV: "//",
             BinOp.MOD: "%", BinOp.MIN: "min", BinOp.MAX: "max"}


def host_checks(low):
    """What a kernel of `low` checks on the host at each call, as its Signature holds it:
    (the conditions on the sizes, required_json; the Python-int checks, weak.checks)."""
    return (required_json(low.required, [v for v, _, _ in low.sizes]),
            weak.checks([(t.op.body, t.op.loc) for t in low.graph.stages]))


def required_json(required, sizes):
    """The conditions on the sizes a call checks (jitdl.lower.lower._required), as JSON for
    the Signature: [op, size tree, number, message, [[name, position, dim], ...], file,
    line, error kind]; one that holds whatever the sizes (a constant) is left out."""
    out = []
    for size, op, number, message, named, loc, error in required:
        tree = size_tree(size, sizes)
        if isinstance(tree, int) and (tree == number if op == "==" else tree > number):
            continue
        out.append([op, tree, int(number), message, [[n, int(p), int(d)] for n, p, d in named],
                    loc.filename if loc else None, loc.lineno if loc else None, error])
    return out


def size_tree(e, sizes):
    """An output dimension as JSON for the Signature: an int, ["n", k] for the k-th size
    parameter, or [op, a, b] (jitdl.runtime.kernel evaluates it at each call)."""
    match e:
        case int():
            return e
        case Const():
            return int(e.value)
        case Var() if e in sizes:
            return ["n", sizes.index(e)]
        case Cast() if dtypes.is_int(e.value.dtype):
            return size_tree(e.value, sizes)
        case Binary() if e.op in _TREE_OPS:
            return [_TREE_OPS[e.op], size_tree(e.a, sizes), size_tree(e.b, sizes)]
    raise ArgumentError(f"an output size `{expr_text(e)}` must be computed from the "
                        "sizes of dynamic arguments with + - * // % min max")


def compile(graph, target, options=Options(), steps=None, schedule_fn=None, config=None,
            texts=False) -> Artifact:  # noqa: A001 (the pipeline's one verb)
    """Every pass: graph -> object code, as an Artifact."""
    low = lower(graph, target, options, steps, schedule_fn, config, texts=texts)
    return build(low, target, options)
