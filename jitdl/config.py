"""Every JITDL_* setting, read in one place."""
from __future__ import annotations

import os
from dataclasses import dataclass

from jitdl.errors import warn


def _int(name, default, low=0, high=None):
    """The integer setting `name`, taken into [low, high]: a value out of that range is
    warned about and clamped, one that is not an integer warned about and the default
    used."""
    v = os.environ.get(name, "").strip()
    if not v:
        return default
    try:
        n = int(v)
    except ValueError:
        # a warning, as for JITDL_LOG: an error here is a traceback out of `import jitdl`
        # (and of every `jitdl` command), far from the shell line that set the variable
        warn(f"{name}={v!r} is not an integer; using the default, {default}",
             RuntimeWarning)
        return default
    clamped = max(low, n if high is None else min(high, n))
    if clamped != n:
        warn(f"{name}={v!r} is outside the range it takes, "
             f"{low}..{'' if high is None else high}; using {clamped}", RuntimeWarning)
    return clamped


@dataclass
class Settings:
    num_threads: int          # JITDL_NUM_THREADS: threads of parallel loops (default:
                              #   OMP_NUM_THREADS if set, else all cores)
    log: str                  # JITDL_LOG: comma-separated topics to log (LOG_TOPICS)
    opt_level: int            # JITDL_OPT_LEVEL: LLVM speed level 0-3 (default 3)
    cache: bool               # JITDL_CACHE: 0 disables the on-disk kernel cache
    cache_dir: str            # JITDL_CACHE_DIR: where (default: the user cache dir)
    cache_max_bytes: int      # JITDL_CACHE_MAX_BYTES: size cap, LRU eviction (default 1 GiB)
    warm_up: bool             # JITDL_WARM_UP=0: no LLVM/libgomp start-up thread at import
    linker: str               # JITDL_LINKER: ld used to make shared libraries of cached
                              #   kernels (default: ld on PATH; 0: MCJIT loads them)
    pool_bytes: int           # JITDL_POOL_BYTES: freed large kernel outputs kept for reuse
                              #   (default: 512 MiB or 1/32 of memory, less; 0: none)
    tune_budget: str          # JITDL_TUNE_BUDGET: what autotune="background" spends per
                              #   key: trials ("64"), seconds ("90s", "2m") or both
                              # (JITDL_TUNING_DB is read at each use: tuning_db())


OFF = ("0", "no", "none", "off", "false")     # values that turn a setting off
ON = ("1", "yes", "on", "true")


def _flag(name):
    """A setting that is on unless turned off (JITDL_CACHE, JITDL_WARM_UP), in any case;
    a value that is neither is warned about and leaves it on."""
    v = os.environ.get(name, "").strip()
    if v.lower() in OFF:
        return False
    if v and v.lower() not in ON:
        warn(f"{name}={v!r} is neither on ({', '.join(ON)}) nor off ({', '.join(OFF)}); "
             f"it stays on", RuntimeWarning)
    return True


def _omp_threads():
    """OMP_NUM_THREADS's first number (it may list one per nesting level), or None."""
    v = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(v) if v.isdigit() and int(v) > 0 else None


def cores():
    """The cores this process may run on: its CPU affinity (taskset, a cpuset), fewer
    where its cgroup's CPU quota allows less time (docker --cpus=2 on a 64-core host)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    quota = cgroup_cpus()
    return max(1, min(n, quota)) if quota else n


def cgroup_cpus(root="/sys/fs/cgroup", membership="/proc/self/cgroup"):
    """The CPUs' worth of time this process's cgroup and its ancestors allow per period
    (cpu.max of cgroup v2, cpu.cfs_quota_us / cpu.cfs_period_us of v1), rounded up; None
    where no quota is set or none can be read."""
    try:
        with open(membership) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":                                   # v2: 0::/path
            limits += _quotas(os.path.join(root, path.lstrip("/")), root, "cpu.max")
        elif "cpu" in controllers.split(","):                   # v1: N:cpu,cpuacct:/path
            base = os.path.join(root, controllers)
            if not os.path.isdir(base):
                base = os.path.join(root, "cpu")
            limits += _quotas(os.path.join(base, path.lstrip("/")), base, "cpu.cfs_quota_us")
    return min(limits) if limits else None


def _quotas(directory, top, name):
    """The CPU quotas (whole CPUs, rounded up) set in `directory` and above it to `top`."""
    found = []
    while True:
        try:
            with open(os.path.join(directory, name)) as f:
                text = f.read().split()
            if name == "cpu.max":
                quota, period = text[0], (text[1] if len(text) > 1 else "100000")
            else:
                with open(os.path.join(directory, "cpu.cfs_period_us")) as f:
                    quota, period = text[0], f.read().split()[0]
            if quota not in ("max", "-1") and int(period) > 0 and int(quota) > 0:
                found.append(max(1, -(-int(quota) // int(period))))
        except (OSError, ValueError, IndexError):
            pass
        if os.path.normpath(directory) == os.path.normpath(top) or directory in ("", "/"):
            return found
        directory = os.path.dirname(os.path.normpath(directory))


def _default_pool_bytes():
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        memory = 1 << 34
    return min(1 << 29, memory // 32)


def load() -> Settings:
    return Settings(
        num_threads=_int("JITDL_NUM_THREADS", _omp_threads() or cores(), low=1),
        log=os.environ.get("JITDL_LOG", ""),
        opt_level=_int("JITDL_OPT_LEVEL", 3, high=3),
        cache=_flag("JITDL_CACHE"),
        # absolute: a relative directory must not move with os.chdir
        cache_dir=os.path.abspath(os.environ.get("JITDL_CACHE_DIR") or _user_cache_dir()),
        cache_max_bytes=_int("JITDL_CACHE_MAX_BYTES", 1 << 30, low=1 << 20),
        warm_up=_flag("JITDL_WARM_UP"),
        linker=os.environ.get("JITDL_LINKER", "").strip(),
        pool_bytes=_int("JITDL_POOL_BYTES", _default_pool_bytes()),
        tune_budget=os.environ.get("JITDL_TUNE_BUDGET", "").strip() or "64,120s",
    )


def _user_cache_dir():
    try:
        import platformdirs
        return platformdirs.user_cache_dir("jitdl", appauthor=False)
    except ImportError:
        return os.path.join(os.path.expanduser("~"), ".cache", "jitdl")


def tuning_db() -> str | None:
    """The tuning records' sqlite file: JITDL_TUNING_DB if set, else tuning.sqlite in the
    per-user data directory; None when JITDL_TUNING_DB turns records off (0, off, false,
    no). Read at each use, so that a test or a script can move it after import."""
    path = os.environ.get("JITDL_TUNING_DB", "").strip()
    if path.lower() in ("0", "off", "false", "no"):
        return None
    if path:
        return os.path.abspath(os.path.expanduser(path))
    import platformdirs
    return os.path.join(platformdirs.user_data_dir("jitdl", appauthor=False), "tuning.sqlite")


settings = load()

LOG_TOPICS = ("cache", "schedule", "tune")
# cache: hit/miss per call, what differed on a miss; schedule: automatic schedules that fell
# back, and why; tune: tuning records applied or ignored, background tuning's progress
_log_warned = set()


def setup_logging():
    """JITDL_LOG=cache,schedule: send those topics' messages (all levels) to stderr. An
    unknown topic is warned about (once per value), not silently ignored."""
    import logging
    topics = [t.strip().lower() for t in settings.log.split(",") if t.strip()]
    unknown = [t for t in topics if t not in LOG_TOPICS]
    if unknown and settings.log not in _log_warned:
        _log_warned.add(settings.log)
        import warnings
        warnings.warn(f"JITDL_LOG={settings.log!r}: unknown topic"
                      f"{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))}, ignored; "
                      f"the topics are: {', '.join(LOG_TOPICS)} (comma-separated)",
                      RuntimeWarning, stacklevel=2)
    for topic in topics:
        if topic not in LOG_TOPICS:
            continue
        logger = logging.getLogger(f"jitdl.{topic}")
        if not logger.handlers:
            h = logging.StreamHandler()
            h.setFormatter(logging.Formatter("%(name)s: %(message)s"))
            logger.addHandler(h)
        logger.setLevel(logging.DEBUG)
