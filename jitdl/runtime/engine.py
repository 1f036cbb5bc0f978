"""The LLVM JIT: the host target machine, the O3 pipeline, MCJIT engines, libgomp."""
from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import glob
import os
import re
import subprocess
import threading
import warnings

import llvmlite.binding as llvm
import numpy as np

from jitdl.config import settings
from jitdl.errors import ArgumentError, ArgumentValueError, user_loc
from jitdl.target import cpu as cpu_target
from jitdl.target.cpu import HEAP_HOOKS

_lock = threading.Lock()
_state = {}


def _init():
    if "target" in _state:
        return _state
    with _lock:
        if "target" in _state:
            return _state
        cpu_target.llvm()
        host = cpu_target.host()
        _state["cpu"], _state["features"] = host.cpu, host.features
        _state["gomp"] = _load_gomp()
        _state["target"] = llvm.Target.from_default_triple()
    return _state


_warm_up_thread = None


# Without a linker, disk hits are loaded by MCJIT, whose first load in a process pages in
# LLVM's object loader and resolves libgomp's symbols (~1 ms). The warm-up thread then
# loads this module, which calls what parallel kernels call (it is never run: an OpenMP
# team belongs to the thread that starts it).
_WARM_UP_IR = """
declare void @GOMP_parallel(ptr, ptr, i32, i32)
declare i32 @omp_get_num_threads()
declare i8 @GOMP_loop_dynamic_start(i64, i64, i64, i64, ptr, ptr)
declare i8 @GOMP_loop_dynamic_next(ptr, ptr)
declare void @GOMP_loop_end_nowait()

define internal void @body(ptr noalias %data) {
entry:
  %span = alloca [2 x i64]
  %last = getelementptr i64, ptr %span, i64 1
  %n = call i32 @omp_get_num_threads()
  %more = call i8 @GOMP_loop_dynamic_start(i64 0, i64 1, i64 1, i64 1, ptr %span, ptr %last)
  %again = call i8 @GOMP_loop_dynamic_next(ptr %span, ptr %last)
  call void @GOMP_loop_end_nowait()
  ret void
}

define void @jd_warm_up(ptr %data) {
entry:
  call void @GOMP_parallel(ptr @body, ptr %data, i32 1, i32 0)
  ret void
}
"""


def _warm_up(also=None, mcjit_loads=None):
    s = _init()
    if also is not None:
        with _also_lock:        # (its imports: no fork in the middle of one, _before_fork)
            also()
    if (mcjit_loads is None or mcjit_loads()) and s["gomp"] is not None:
        tm = _target_machine()
        mod = llvm.parse_assembly(_WARM_UP_IR)
        mod.triple = llvm.get_process_triple()
        mod.data_layout = str(tm.target_data)
        Loaded(tm.emit_object(mod), "jd_warm_up")
        s["spare_tm"] = _new_target_machine(s)      # for the first load (~0.2 ms)


# llvmlite serialises calls into LLVM with one lock; a fork while another thread (the
# warm-up, a compile) holds it would leave it held forever in the child
_llvm_lock = getattr(getattr(getattr(llvm, "ffi", None), "lib", None), "_lock", None)
_llvm_lock = getattr(_llvm_lock, "_lock", None)


# held while the warm-up thread runs `also`, which imports modules (platformdirs, the
# tuning records): a fork in the middle of an import leaves the child that module's import
# lock, held by a thread it does not have, and its own first import of the module (a first
# call's tuning-record lookup) waits for ever
_also_lock = threading.Lock()


def _before_fork():
    _also_lock.acquire()             # no fork while the warm-up thread imports
    _lock.acquire()                  # no fork while LLVM or libgomp is half set up
    if _llvm_lock is not None:
        _llvm_lock.acquire()         # ... or while another thread is inside LLVM


def _after_fork_in_parent():
    if _llvm_lock is not None:
        _llvm_lock.release()
    _lock.release()
    _also_lock.release()


def _after_fork_in_child():
    _after_fork_in_parent()
    gomp = _state.get("gomp")
    if gomp is not None and _state.get("kernels_loaded"):
        # libgomp's thread pool does not survive fork: a parallel region in the child of
        # a process that ran one hangs. One thread needs no pool.
        gomp.omp_set_num_threads(ctypes.c_int(1))
        warnings.warn("jitdl: in a forked child process, parallel loops run on one thread "
                      "(libgomp cannot be used after fork); start worker processes with "
                      "the 'spawn' or 'forkserver' method to run them in parallel",
                      RuntimeWarning, stacklevel=2)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


def kernel_loaded():
    """Note that kernels (perhaps with parallel loops) may have run in this process."""
    _state["kernels_loaded"] = True


def warm_up_in_background(also=None, mcjit_loads=None):
    """Start LLVM's target and load libgomp on a daemon thread (then call `also`, e.g.
    to compute the cache key's environment), so that the first call of a process (often
    a disk-cache hit of a few ms) does not wait for them; when `mcjit_loads()` says disk
    hits will be loaded by MCJIT, exercise its loader too. Code generation waits for this
    thread first, and so does the interpreter's exit (nothing may be inside LLVM when it
    shuts down)."""
    global _warm_up_thread

    def work():
        try:
            _warm_up(also, mcjit_loads)
        except Exception:       # the first call will report it properly
            pass
    t = threading.Thread(target=work, name="jitdl-warm-up", daemon=True)
    _warm_up_thread = t
    atexit.register(_wait_for_warm_up)
    t.start()
    return t


def _wait_for_warm_up():
    t = _warm_up_thread
    if t is not None and t is not threading.current_thread():
        t.join()


def _target_machine():
    """A new target machine for the host; an MCJIT engine takes ownership of its own.

    Code is position-independent, so that one object file can be loaded by MCJIT and
    also linked into a shared library (see native.link_shared), and uses the large code
    model: MCJIT's memory manager may place a kernel's code and its constants more than
    2 GiB apart, out of reach of the small model's 32-bit PC-relative references."""
    _wait_for_warm_up()
    s = _init()
    return s.pop("spare_tm", None) or _new_target_machine(s)


def _new_target_machine(s, opt=3):
    return s["target"].create_target_machine(cpu=s["cpu"], features=s["features"], opt=opt,
                                             reloc="pic", codemodel="large")


def _gomp_candidates():
    yield "libgomp.so.1"                 # the dynamic loader's own search: no subprocess
    found = ctypes.util.find_library("gomp")
    if found:
        yield found
    for pkg in ("xgboost_cpu.libs", "xgboost.libs"):
        for site in __import__("site").getsitepackages() + [__import__("site").getusersitepackages()]:
            yield from glob.glob(os.path.join(site, pkg, "libgomp*.so*"))
    try:
        path = subprocess.run(["gcc", "-print-file-name=libgomp.so"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        if os.path.isabs(path):
            yield path
    except (OSError, subprocess.SubprocessError):
        pass


def _load_gomp():
    """Load libgomp for parallel loops; None (serial loops, one warning) if there is none.

    Idle OpenMP workers (and the thread waiting at a loop's end) spin before sleeping;
    libgomp's default (300k spins) keeps a core busy for a scheduler time slice after
    every parallel loop, which costs milliseconds when the machine is shared (measured: a
    0.2 ms kernel took 8 ms). The commonest sharer is NumPy's own BLAS, whose threads
    spin for about 0.1 s after each call: then a worker waits for a core that two
    spinners hold (2-core Xeon, a jitdl matmul 512^2 right after NumPy's: 9-10 ms with
    30k spins, 3.9-4.7 with 3k, 2.4-2.6 never spinning, 1.4 on a quiet machine; 256^2
    2.2 / 0.8 / 0.4 / 0.17 ms). Unless the user chose a policy, spin 3k times, which
    costs nothing measurable on a quiet machine (back-to-back matmul 256^2 and softmax
    1024^2 as with 30k; not spinning at all made them 20-30% slower).
    """
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = "3000"
    # libgomp reads its default team size, for every thread, when it loads (its
    # omp_set_num_threads sets only the calling thread's, here the warm-up thread's): the
    # variable says JITDL_NUM_THREADS while it loads, and what it said before afterwards
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(settings.num_threads)
    try:
        for path in _gomp_candidates():
            try:
                lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                llvm.load_library_permanently(path)
                return lib
            except OSError:
                continue
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved
    warnings.warn("jitdl: no libgomp found (install gcc's libgomp1 or xgboost-cpu); "
                  "parallel loops will run serially", RuntimeWarning, stacklevel=3)
    return None


def target_info():
    host = cpu_target.host()
    return {"triple": host.triple, "cpu": host.cpu, "features": host.features,
            "llvm": ".".join(map(str, llvm.llvm_version_info))}


def array_data_offset():
    """Where NumPy keeps an array's data pointer (None: calls pass data pointers)."""
    return cpu_target.host().array_data_offset


def parallel_available():
    return _init()["gomp"] is not None


def set_num_threads(n: int):
    """Threads used by parallel loops run from the calling thread from now on (libgomp
    keeps a team size per thread), and planned for by the schedules compiled from now
    on. JITDL_NUM_THREADS sets it for every thread."""
    # (numba and torch refuse these too: 0 or 2.5 threads is a mistake, not a request
    # for 1 or 2, which int() and a floor of 1 made of it without a word)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise ArgumentError(f"set_num_threads: argument 'n' must be an int >= 1, "
                            f"got {type(n).__name__} {n!r}", user_loc())
    if n < 1:
        raise ArgumentValueError(f"set_num_threads: argument 'n' must be an int >= 1, "
                                 f"got {n}", user_loc())
    gomp = _init()["gomp"]
    settings.num_threads = int(n)
    if gomp is not None:
        gomp.omp_set_num_threads(ctypes.c_int(settings.num_threads))


def optimize(ir_text):
    """Parse, verify and optimise a module (O3 for the host): (object code, optimised IR).
    `ir_text` may be several modules' texts one after the other (each from its
    `; ModuleID` line, as llvmlite prints them: a kernel's and its entries', see
    jitdl.codegen.llvm.entries_text), linked into the first.

    The optimised module is verified again before code generation. LLVM's SLP
    vectoriser has been seen to emit a use before its definition in fully unrolled
    straight-line kernels (a 3-d adaptive average pool of 5x2x2 to 4x3x3), which
    code generation then meets with an assertion that aborts the process. Such a
    module is optimised again without the SLP vectoriser, then without either
    vectoriser; a module no setting makes valid is an error, never an abort."""
    tm = _target_machine()
    for loop_vectorize, slp_vectorize in _VECTORISERS:
        mod = _parse(ir_text, tm)
        mod.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=settings.opt_level)
        pto.loop_vectorization = loop_vectorize
        pto.slp_vectorization = slp_vectorize
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        try:
            mod.verify()
        except RuntimeError as e:
            problem = e
            continue
        return tm.emit_object(mod), str(mod)
    raise RuntimeError(f"LLVM's optimiser produced an invalid module with every vectoriser "
                       f"setting; this is a jitdl or LLVM bug: {problem}")


def object_code(ir_text):
    """Object code of a module as written: verified, no optimisation passes, LLVM's fast
    code generator (level 0: fast instruction selection and register allocation), for
    small hand-written runtime modules, where more would cost more than it saves. (The
    memory pool's module, which a cold cache's first large output waits for, took 17-22
    ms of CPU at level 3 and 3.4-4 ms at level 0 on a loaded 2-core Zen 4; its functions
    are a few instructions around malloc and free, run once per pooled array or kernel
    heap buffer.)"""
    _wait_for_warm_up()
    tm = _new_target_machine(_init(), opt=0)
    mod = _parse(ir_text, tm)
    mod.verify()
    return tm.emit_object(mod)


def _parse(ir_text, tm):
    """One module of the text of one or more (linked into the first), for the host."""
    mod = None
    for text in re.split(r"(?m)^(?=; ModuleID = )", ir_text):
        if not text.strip():
            continue
        part = llvm.parse_assembly(text)
        part.triple = llvm.get_process_triple()
        part.data_layout = str(tm.target_data)
        if mod is None:
            mod = part
        else:
            mod.link_in(part)
    return mod


# Vectoriser settings tried in turn (loop, SLP): the first whose output verifies is used.
_VECTORISERS = ((True, True), (True, False), (False, False))


class Loaded:
    """Object code loaded into its own MCJIT engine (cold compiles and disk hits alike)."""

    def __init__(self, obj: bytes, symbol: str):
        tm = _target_machine()
        self.obj = obj
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        self.engine.finalize_object()
        self.address = self.function(symbol)
        self.fast_address = self.function(symbol + ".fast")
        self.direct_address = self.function(symbol + ".direct")
        if not self.address:
            raise RuntimeError(f"symbol {symbol} not found in the object code")
        # where its allocation hooks live (runtime.kernel.Kernel points them at the pool)
        self.heap_hooks = tuple(self.variable(symbol + h) for h in HEAP_HOOKS)

    def function(self, name):
        """The address of function `name` (0: none)."""
        return self.engine.get_function_address(name)

    def variable(self, name):
        """The address of global variable `name` (0: none)."""
        return self.engine.get_global_value_address(name)


def assembly(optimized_ir: str) -> str:
    """Host assembly of an optimised module."""
    return _target_machine().emit_assembly(llvm.parse_assembly(optimized_ir))
