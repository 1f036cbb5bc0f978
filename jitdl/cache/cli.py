"""`python -m jitdl cache info|list|clear|verify` and `python -m jitdl tune
list|export|import|clear` (also the `jitdl` console script)."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import warnings


def _store():
    from jitdl.cache.store import Store
    from jitdl.config import settings
    if not settings.cache:
        print("the kernel cache is disabled (JITDL_CACHE=0)")
        return None
    st = Store(settings.cache_dir, settings.cache_max_bytes, create=False)
    if not st.usable:
        print(f"the kernel cache at {settings.cache_dir} is not usable (see the warning)")
        return None
    return st


def _mb(n):
    return f"{n / 1e6:.2f} MB"


def cmd_info(st, args):
    entries = st.entries()
    hits = st.hits()
    print(f"cache directory: {st.root}" + ("" if os.path.isdir(st.root) else " (not made yet)"))
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


# -- jitdl tune ------------------------------------------------------------------------------
def _call_text(signature):
    """`float32[64, 64], float64 (python)` for a signature that is the JSON of argument
    specs; the text itself for any other."""
    try:
        out = []
        for s in json.loads(signature):
            if s[0] == "array":
                out.append(f"{s[2]}[{', '.join(map(str, s[1]))}]")
            elif s[0] == "static":
                out.append(repr(s[1]))
            else:
                out.append(f"{s[1]}{' (python)' if s[2] else ''}")
        return ", ".join(out)
    except (ValueError, TypeError, IndexError, KeyError):
        return signature


def _seconds(t):
    if t >= 1:
        return f"{t:.3f} s"
    return f"{t * 1e3:.3f} ms" if t >= 1e-3 else f"{t * 1e6:.1f} us"


def _age(s):
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if s >= size:
            return f"{s / size:.0f} {unit}"
    return f"{s:.0f} s"


def tune_list(rec, args):
    from jitdl._version import __version__
    groups = rec.summary(args.function)
    print(f"tuning records: {rec.path}")
    if rec.problem:
        return 1
    if not groups:
        print("no records" + (f" of {args.function}" if args.function else ""))
        return 0
    now = time.time()
    head = ("function", "call", "target", "best", "throughput", "trials", "verified", "age")
    rows = []
    for g in groups:
        b = g["best"]
        rows.append((g["function"], _call_text(g["signature"]), g["target_name"],
                     _seconds(b.seconds) if b else "-",
                     f"{b.throughput:.1f} {b.unit}" if b else "-", str(g["trials"]),
                     str(g["verified"]), _age(max(0.0, now - g["last"])),
                     "" if g["jitdl"] == __version__ else
                     f"made by jitdl {g['jitdl']}: not applied"))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    right = {3, 4, 5, 6, 7}
    for r in [head + ("",)] + rows:
        cells = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(r, widths))]
        print("  ".join(cells + [r[-1]]).rstrip())
    return 0


def tune_export(rec, args):
    try:
        n = rec.export_json(sys.stdout if args.file == "-" else args.file, args.function)
    except OSError as e:
        print(f"jitdl tune export: {e}", file=sys.stderr)
        return 1
    print(f"exported {n} records from {rec.path} to {args.file}",
          file=sys.stderr if args.file == "-" else sys.stdout)
    return 1 if rec.problem else 0


def tune_import(rec, args):
    try:
        n = rec.import_json(sys.stdin if args.file == "-" else args.file)
    except (OSError, ValueError) as e:
        print(f"jitdl tune import: {e}", file=sys.stderr)
        return 1
    print(f"imported {n} records into {rec.path}")
    return 1 if rec.problem or rec.read_only else 0


def tune_clear(rec, args):
    n = sum(g["records"] for g in rec.summary(args.function))
    what = f"{n} records" + (f" of {args.function}" if args.function else "")
    if rec.problem:
        print(f"nothing removed from {rec.path}")
        return 1
    if n and not args.yes:
        if not sys.stdin.isatty():
            print(f"jitdl tune clear: this would remove {what} from {rec.path}; "
                  "add --yes to do it", file=sys.stderr)
            return 1
        if input(f"remove {what} from {rec.path}? [y/N] ").strip().lower() not in ("y",
                                                                                  "yes"):
            print("nothing removed")
            return 1
    print(f"removed {rec.clear(args.function) if n else 0} records from {rec.path}")
    return 1 if rec.read_only else 0


def _tune(args):
    """Run a tune command; its warnings (a damaged file, a skipped row) are printed as
    plain lines, without the source location Python would add."""
    from jitdl.autotune.records import Records   # lazy: the CLI fronts the records too
    from jitdl.config import tuning_db
    if tuning_db() is None:
        print("the tuning records are off (JITDL_TUNING_DB=0)")
        return 1

    def show(message, *_):
        print(message, file=sys.stderr)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        rec = Records()
        try:
            return {"list": tune_list, "export": tune_export, "import": tune_import,
                    "clear": tune_clear}[args.cmd](rec, args)
        finally:
            rec.close()


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
    tune = sub.add_parser("tune", help="the tuning records (JITDL_TUNING_DB overrides "
                                       "where they are)")
    tsub = tune.add_subparsers(dest="cmd", required=True)
    t = tsub.add_parser("list", help="best time, trials and age per function and call")
    t.add_argument("function", nargs="?", help="a function's name (or its qualified name)")
    t = tsub.add_parser("export", help="write records as JSON")
    t.add_argument("file", help="the JSON file to write ('-': standard output)")
    t.add_argument("function", nargs="?", help="only this function's records")
    t = tsub.add_parser("import", help="add the records of a JSON export")
    t.add_argument("file", help="the JSON file to read ('-': standard input)")
    t = tsub.add_parser("clear", help="remove records")
    t.add_argument("function", nargs="?", help="only this function's records")
    t.add_argument("--yes", action="store_true", help="do not ask")
    args = p.parse_args(argv)
    try:
        if args.group == "tune":
            code = _tune(args)
        else:
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
