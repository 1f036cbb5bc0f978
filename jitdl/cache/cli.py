"""`python -m jitdl cache info|list|clear|verify` (also the `jitdl` console script)."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time


def _store():
    from jitdl.cache.store import Store
    from jitdl.config import settings
    if not settings.cache:
        print("the kernel cache is disabled (JITDL_CACHE=0)")
        return None
    st = Store(settings.cache_dir, settings.cache_max_bytes)
    if not st.usable:
        print(f"the kernel cache at {settings.cache_dir} is not usable (see the warning)")
        return None
    return st


def _mb(n):
    return f"{n / 1e6:.2f} MB"


def cmd_info(st, args):
    entries = st.entries()
    hits = st.hits()
    print(f"cache directory: {st.root}")
    print(f"entries:         {len(entries)} ({sum(1 for e in entries if e[1] is None)} damaged)")
    print(f"size:            {_mb(sum(e[2] for e in entries))} of {_mb(st.max_bytes)} "
          "(JITDL_CACHE_MAX_BYTES)")
    print(f"hits recorded:   {sum(hits.values())}")
    print(f"linked:          {sum(1 for e in entries if e[4])} entries carry a shared library "
          "(loaded with dlopen; the others with MCJIT)")
    return 0


def cmd_list(st, args):
    entries = sorted(st.entries(), key=lambda e: -e[3])
    hits = st.hits()
    print(f"{'key':12s}  {'hits':>5s}  {'size':>9s}  {'last used':19s}  function(arguments)")
    for key, meta, size, mtime, _ in entries:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime))
        what = f"{meta.get('fname', '?')}({meta.get('call', '')})" if meta else "<damaged>"
        print(f"{key[:12]}  {hits.get(key, 0):5d}  {size:9d}  {when}  {what}")
    return 0


def cmd_clear(st, args):
    n = st.clear()
    print(f"removed {n} entries from {st.root}")
    return 0


def cmd_verify(st, args):
    good, bad = st.verify(remove=args.remove)
    print(f"{len(good)} entries intact, {len(bad)} damaged" +
          (" (removed)" if bad and args.remove else ""))
    for key in bad:
        print(f"  damaged: {key}")
    return 1 if bad and not args.remove else 0


def main(argv=None):
    p = argparse.ArgumentParser(prog="jitdl", description="jitdl utilities")
    sub = p.add_subparsers(dest="group", required=True)
    cache = sub.add_parser("cache", help="the on-disk kernel cache")
    csub = cache.add_subparsers(dest="cmd", required=True)
    csub.add_parser("info", help="location, size, entry count")
    csub.add_parser("list", help="entries with function, arguments and hit counts")
    csub.add_parser("clear", help="remove every entry")
    v = csub.add_parser("verify", help="check every entry's checksum")
    v.add_argument("--remove", action="store_true", help="delete damaged entries")
    args = p.parse_args(argv)
    try:
        st = _store()
        if st is None:
            return 1
        code = {"info": cmd_info, "list": cmd_list, "clear": cmd_clear,
                "verify": cmd_verify}[args.cmd](st, args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # the reader has gone (`jitdl cache list | head`): stop quietly, as a program
        # stopped by SIGPIPE; what is still buffered goes nowhere, not to a traceback
        # at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
