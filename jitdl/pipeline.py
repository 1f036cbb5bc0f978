"""The compile pipeline: TE graph + schedule + target + options -> compiled artefact.

Pure: it reads no cache, writes no file and keeps no state, so a tuning worker in a
spawned process runs it as the decorator does. Its passes, in order:

    schedule         the user's schedule function with a config, recorded steps, or
                     the target's automatic schedule -> a Schedule
    lower            bounds and shape checks, loop nests -> loop IR
    simplify         canonical arithmetic, decided guards, // and % by constants
    partition_loops  guard-free main parts and tails of non-dividing splits
    simplify_tails   simplify again, inside the new tails
    verify           loop-IR invariants
    codegen          loop IR -> LLVM IR (cpu)
    optimize         LLVM's O3 pipeline for the target, object code

`lower()` runs up to verify, `build()` the rest, `compile()` both; `until=` stops after
the named pass, and every loop-IR stage's text is kept when `texts=True` (the LLVM
stages' texts are always kept, as llvm_ir_unoptimized and llvm_ir).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from jitdl.codegen.llvm import generate
from jitdl.errors import ArgumentError
from jitdl.ir import weak
from jitdl.lower.lower import lower as lower_nests
from jitdl.runtime import engine
from jitdl.runtime.kernel import Signature
from jitdl.schedule.config import Config
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


@dataclass(frozen=True)
class Options:
    """What besides the graph, the schedule and the target decides the binary."""
    name: str = "kernel"          # the user's name for messages; the symbol is derived
    strict_fp: bool = False       # keep sequential floating-point order in reductions
    num_threads: int = 1          # threads the automatic schedule plans parallel loops for
    parallel: bool | None = None  # emit parallel loops (None: when libgomp is there)

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
    texts: dict = field(default_factory=dict)    # pass name -> text after it
    times: dict = field(default_factory=dict)    # pass name -> seconds
    funcs: dict = field(default_factory=dict)    # pass name -> PrimFunc after it

    @property
    def loop_ir(self):
        return str(self.func)

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


def _check_until(until):
    if until is not None and until not in PASSES:
        raise ArgumentError(f"no pass named {until!r}; the passes: {', '.join(PASSES)}")


def schedule(graph, target, options=Options(), steps=None, schedule_fn=None, config=None):
    """The schedule of a graph: steps replayed, a schedule function run with `config`,
    or (neither given) the target's automatic schedule with `config` for its knobs.
    Returns (Schedule, Config or None)."""
    target = get_target(target)
    sched = Schedule(graph)
    if steps is not None:
        return sched.replay(steps), None
    cfg = Config(config, sched)
    if schedule_fn is None:
        target.auto_schedule(sched, cfg, options.num_threads)
    else:
        schedule_fn(sched, cfg)
    return sched, cfg


def lower(graph, target, options=Options(), steps=None, schedule_fn=None, config=None,
          until=None, texts=False) -> Lowered:
    """Run the loop-IR passes (schedule ... verify), or up to `until`."""
    _check_until(until)
    target = get_target(target)
    times, kept = {}, {}
    t0 = time.perf_counter()
    sched, cfg = schedule(graph, target, options, steps, schedule_fn, config)
    times["schedule"] = time.perf_counter() - t0
    if texts:
        kept["schedule"] = repr(sched)
    low = Lowered(graph, sched, cfg, None, [], [], [], 0, kept, times)
    if until == "schedule":
        return low
    t0 = time.perf_counter()
    nests = lower_nests(graph, sched, options.symbol, target.local_buffer_bytes)
    times["lower"] = time.perf_counter() - t0
    low.func, low.inputs, low.outputs, low.scalars, low.checks = (
        nests.func, nests.inputs, nests.outputs, nests.scalars, nests.checks)
    low.funcs["lower"] = low.func
    if texts:
        kept["lower"] = str(low.func)
    for name in LOOP_PASSES[2:]:
        if until is not None and PASSES.index(until) < PASSES.index(name):
            break
        t0 = time.perf_counter()
        if name == "verify":
            verify(low.func)
        else:
            low.func = low.funcs[name] = _TIR[name](low.func)
        times[name] = time.perf_counter() - t0
        if texts:
            kept[name] = str(low.func)
    return low


def build(low: Lowered, target, options=Options(), until=None) -> Artifact:
    """Code generation and optimisation of a lowered function (its "verify" pass run)."""
    _check_until(until)
    target = get_target(target)
    if "verify" not in low.times:
        raise ArgumentError("pipeline.build: lower() stopped before 'verify'")
    graph, times = low.graph, dict(low.times)
    texts = dict(low.texts)
    texts["loop_ir"] = texts.get("verify") or low.loop_ir
    if target.name != "cpu":          # the one branch on the target
        raise ArgumentError(f"pipeline: no code generator for target {target.name!r}")
    parallel = engine.parallel_available() if options.parallel is None else options.parallel
    t0 = time.perf_counter()
    module, checks = generate(low.func, parallel_ok=parallel, strict_fp=options.strict_fp,
                              with_err=low.checks > 0,
                              array_data_offset=target.array_data_offset,
                              n_inputs=len(low.inputs))
    texts["llvm_ir_unoptimized"] = str(module)
    times["codegen"] = time.perf_counter() - t0
    sig = Signature(
        options.name, low.func.name,
        [[b.name, list(b.shape), b.dtype] for b in low.inputs],
        [[b.name, list(b.shape), b.dtype] for b in low.outputs],
        [[v.name, v.dtype] for v in low.scalars],
        [list(c) for c in checks],
        [list(x) for x in graph.layout],
        [list(a) for a in module.jitdl_allocs],
        weak.checks([(t.op.body, t.op.loc) for t in graph.stages]))
    steps = low.schedule.steps
    config = low.config.used if low.config is not None else None
    if until == "codegen":
        return Artifact(sig, b"", texts, steps, config, times)
    t0 = time.perf_counter()
    obj, optimized = engine.optimize(texts["llvm_ir_unoptimized"])
    times["optimize"] = time.perf_counter() - t0
    texts["llvm_ir"] = optimized
    return Artifact(sig, obj, texts, steps, config, times)


def compile(graph, target, options=Options(), steps=None, schedule_fn=None, config=None,
            texts=False) -> Artifact:  # noqa: A001 (the pipeline's one verb)
    """Every pass: graph -> object code, as an Artifact."""
    low = lower(graph, target, options, steps, schedule_fn, config, texts=texts)
    return build(low, target, options)
