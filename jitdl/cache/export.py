"""Ahead-of-time export: compiled kernels and their signatures in one file, and a loader
that needs neither the definition's source nor LLVM code generation.

File: b"JITDLX01", a little-endian u32 entry count, then for each entry a u64 length and a
cache entry (jitdl.cache.store.pack: JSON metadata, object code, the shared library when
`ld` was there to link it, texts, checksum). Loading prefers the library (dlopen).
"""
from __future__ import annotations

import inspect
import struct

from jitdl.cache.store import default_store, pack, unpack, write_atomic
from jitdl.errors import ArgumentError, ArgumentShapeError, JitdlError, user_loc
from jitdl.runtime import engine, native
from jitdl._version import __version__
from jitdl.runtime.kernel import (ABI, Kernel, Signature, call_key, key_of_specs,
                                  refuse_disagreeing, static_positions)

MAGIC = b"JITDLX01"


def write(path, name, kernels, signature=None, refused=()):
    """kernels: [(specs, Kernel)]; signature: the definition's inspect.Signature, whose
    parameters (kinds and defaults) the loaded function takes; refused: [(specs, error)]
    of calls the definition refused at export (patterns of sizes 1 whose sizes cannot
    agree), kept in the first entry's metadata so that the loaded function says why."""
    info = engine.target_info()
    blobs = []
    for n, (specs, k) in enumerate(kernels):
        meta = {"fname": name, "signature": k.sig.to_json(), "specs": specs,
                "cpu": info["cpu"], "features": info["features"], "triple": info["triple"],
                "array_data_offset": engine.array_data_offset()}
        if signature is not None:
            meta["params"] = _params_json(signature)
        if refused and n == 0:
            meta["refused"] = [[s, type(e).__name__, getattr(e, "message", str(e))]
                               for s, e in refused]
        # the shared library too (linked now if the kernel was loaded by MCJIT): the
        # loading process then needs no LLVM at all
        shared = getattr(k.loaded, "shared", None) or native.link_shared(k.loaded.obj)
        blobs.append(pack(meta, k.loaded.obj, {"loop_ir": k.texts.get("loop_ir", "")},
                          shared))
    data = MAGIC + struct.pack("<I", len(blobs)) + b"".join(
        struct.pack("<Q", len(b)) + b for b in blobs)
    # a file like any other the user writes (not private as cache entries are)
    write_atomic(path, data, prefix=".jitdl-export-", public=True)


def _params_json(signature):
    """[name, kind, [default] or []] per parameter. A default JSON cannot give back as the
    same value of the same type (an array, a NumPy scalar, an object) is left out: the
    loaded function then needs that argument, as a kernel of another type would not
    serve it."""
    return [[p.name, p.kind.name, [] if p.default is p.empty else _default_json(p.default)]
            for p in signature.parameters.values()]


def _default_json(v):
    """[the value as JSON] for a Python number, bool, str, None or a tuple of them, else
    []; a float as its hex text (exact: -0.0, nan and inf too)."""
    if v is None or type(v) in (bool, int, str):
        return [v]
    if type(v) is float:
        return [{"float": v.hex()}]
    if type(v) is tuple:
        items = [_default_json(x) for x in v]
        return [{"tuple": [x[0] for x in items]}] if all(items) else []
    return []


_KINDS = {k.name: k for k in (inspect.Parameter.POSITIONAL_ONLY,
                               inspect.Parameter.POSITIONAL_OR_KEYWORD,
                               inspect.Parameter.KEYWORD_ONLY)}


def _signature(params):
    """The inspect.Signature of _params_json's list. A positional parameter before one
    left required (`def f(X, axis=1, s=np.float64(2))`: s's default is left out) is
    required too, as a signature cannot have a default before a required one."""
    required, out = False, []
    for n, kind, d in reversed(params):
        positional = kind != "KEYWORD_ONLY"
        if positional and (required or not d):
            required, d = True, []
        out.append(inspect.Parameter(n, _KINDS[kind],
                                     **({"default": _default_value(d[0])} if d else {})))
    return inspect.Signature(out[::-1])


def _default_value(j):
    if isinstance(j, dict):
        return float.fromhex(j["float"]) if "float" in j else \
            tuple(_default_value(x) for x in j["tuple"])
    return j


class ExportedFunction:
    """A callable over the kernels of an exported file, dispatching on shapes and dtypes."""

    def __init__(self, name, kernels, file, params=None, refused=None):
        self.name = name
        self._kernels = kernels          # key -> Kernel
        self._refused = refused or {}    # key -> (error class name, message) at export
        self._file = file                # (the export file's bytes, its path): pickles
        first = next(iter(kernels.values()), None)
        self._static = static_positions(first.sig.layout) if first else ()
        self._dynamic = dynamic_positions(kernels.values())
        self._dims = dynamic_dims(kernels.values(), self._dynamic)
        if params is None:               # (a file written before they were kept)
            params = _signature([[x[1], "POSITIONAL_OR_KEYWORD", []]
                                 for x in (first.sig.layout if first else ())])
        self._params = self.__signature__ = params
        # (a call of one value per parameter skips binding, unless some parameter is
        # keyword-only, which is never given by position: as Function's _nfast)
        self._nfast = -1 if any(p.kind == p.KEYWORD_ONLY for p in
                                params.parameters.values()) else len(params.parameters)

    def __call__(self, *args, out=None, **kwargs):
        if out is not None and "out" in self._params.parameters:    # `def f(X, out)`
            kwargs["out"], out = out, None          # (its own, as a Function's call)
        args = self._bind(args, kwargs)
        return self._kernel(args).run(args, out)

    def lower(self, *args, **kwargs):
        return self._kernel(self._bind(args, kwargs)).texts.get("loop_ir", "")

    def _bind(self, args, kwargs):
        """The arguments in the definition's order, by position or by its parameters'
        names (a call that leaves one out or adds one is an ArgumentError saying so, not
        an IndexError of the dispatch)."""
        if not kwargs and len(args) == self._nfast:
            return args
        try:
            bound = self._params.bind(*args, **kwargs)
            bound.apply_defaults()
            return tuple(bound.arguments.values())
        except TypeError:
            from jitdl.api import _binding_problem      # (the words a Function's call says)
            raise ArgumentError(f"{self.name}() "
                                f"{_binding_problem(self._params, args, kwargs)}; its "
                                f"parameters are ({', '.join(self._params.parameters)})",
                                user_loc()) from None

    def _kernel(self, args):
        key = call_key(args, self._static, self._dynamic, self._dims)
        k = self._kernels.get(key)
        if k is None and key in self._refused:
            self._refuse_disagreeing(args)
            kind, message = self._refused[key]
            raise (ArgumentShapeError if kind == "ArgumentShapeError" else ArgumentError)(
                f"{self.name}(): no exported kernel for arguments {_show_key(key)}: the "
                f"definition refused these sizes at export ({kind}: {message})", user_loc())
        if k is None:
            raise ArgumentError(
                f"{self.name}(): no exported kernel for arguments "
                f"{_show_key(key)}{self._nearest(key)}; the file holds: "
                + self._held(key) + self._scalar_hint(key), user_loc())
        return k

    def _scalar_hint(self, key):
        """'; a scalar's type selects its kernel ...: pass float(s), or export ...' where
        the nearest kernel differs from the call in a scalar's type only. The function
        itself compiles a kernel per scalar type (an int's dtype rules are not a float's,
        a Python float is weak where np.float64 is not), so no other one serves it."""
        names = list(self._params.parameters)
        if not self._kernels or len(names) != len(key):
            return ""
        near = min(self._kernels, key=lambda k: _distance(key, k))
        at = [i for i, (a, b) in enumerate(zip(key, near)) if a != b]
        if len(at) != 1 or not all(isinstance(x, type) for x in (key[at[0]], near[at[0]])):
            return ""
        i = at[0]
        have, given = near[i], key[i]
        conv = have.__name__ if have.__module__ == "builtins" else f"np.{have.__name__}"
        return (f"; a scalar's type selects its kernel ({self.name} compiles one per type, "
                f"as their dtype rules differ): pass {conv}({names[i]}), or export "
                f"from an example where {names[i]!r} is {_a(given.__name__)} too")

    def _refuse_disagreeing(self, args):
        """The call's shape mismatch, as a kernel's check at the call words it, where
        its arguments differ in sizes that the held kernels check equal (what a pattern
        refused at export is, the mismatch comes first, as the function's call says)."""
        for k in self._kernels.values():
            refuse_disagreeing(self.name, k.sig.agree, args)

    def _held(self, key):
        """The file's kernels as a message lists them: all, in the file's order, or (a
        dynamic export holds a kernel per pattern of sizes 1) the SHOWN nearest the call
        and how many more."""
        held = list(self._kernels)
        if len(held) <= SHOWN:
            return "; ".join(map(_show_key, held))
        near = sorted(held, key=lambda k: _distance(key, k))[:SHOWN]
        return "; ".join(map(_show_key, near)) + f"; and {len(held) - SHOWN} more"

    def _nearest(self, key):
        """', argument 'B' is ..., the nearest exported kernel takes ...': the first
        argument in which the call differs from the kernel it differs from least (fewest
        arguments, then fewest dimensions)."""
        names = list(self._params.parameters)
        if not self._kernels or len(names) != len(key):
            return ""
        def differ(k):
            return [i for i, (a, b) in enumerate(zip(key, k)) if a != b]
        near = min(self._kernels, key=lambda k: _distance(key, k))
        at = differ(near)
        if not at:
            return ""
        i = at[0]
        return (f": argument {names[i]!r} is {_show_part(key[i])}, the nearest exported "
                f"kernel takes {_show_part(near[i])}")

    def __repr__(self):
        return f"<jitdl exported {self.name}: {len(self._kernels)} kernel(s)>"

    def __reduce__(self):
        """Pickled as the file's bytes, loaded again on the other side (a process pool):
        its kernels hold ctypes pointers, which do not pickle."""
        return _loads, self._file


SHOWN = 8      # kernels an error lists at most (ExportedFunction._held)


def _distance(key, k):
    """How far a call's key is from a kernel's: (arguments that differ, then among
    arrays of one rank the dimensions and dtypes that differ)."""
    args = dims = 0
    for a, b in zip(key, k):
        if a != b:
            args += 1
            if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) == 2 \
                    and isinstance(a[0], tuple) and isinstance(b[0], tuple) \
                    and len(a[0]) == len(b[0]):
                dims += sum(x != y for x, y in zip(a[0], b[0])) + (a[1] != b[1])
            else:
                dims += 1000
    return args, dims


def dynamic_positions(kernels):
    """The argument positions of dynamic arrays: those with a symbolic size in some
    kernel (an array of size 1 everywhere has the same key either way)."""
    out = set()
    for k in kernels:
        pos = [i for i, x in enumerate(k.sig.layout) if x[0] == "array"]
        out.update(p for p, (_, shape, _) in zip(pos, k.sig.inputs) if None in shape)
    return tuple(sorted(out))


def dynamic_dims(kernels, positions):
    """{position: its symbolic dimensions} for the dynamic arrays whose kernels keep some
    dimension other than 1 concrete (@jd.compute(dynamic={"x": 0})); the others are
    symbolic in every dimension."""
    out = {}
    for k in kernels:
        pos = [i for i, x in enumerate(k.sig.layout) if x[0] == "array"]
        for p, (_, shape, _) in zip(pos, k.sig.inputs):
            if p in positions:
                d = out.setdefault(p, [False, set()])
                d[0] |= any(s is not None and s != 1 for s in shape)
                d[1].update(n for n, s in enumerate(shape) if s is None)
    return {p: tuple(sorted(ds)) for p, (partial, ds) in out.items() if partial and ds}


def _a(word):
    return ("an " if word[0] in "aeiou" else "a ") + word


def _show_key(key):
    return "(" + ", ".join(map(_show_part, key)) + ")"


def _show_part(k):
    """One argument's part of a dispatch key (see call_key) as a person reads it: a
    static value, `float64[3, 4]` (None: a symbolic size), `matrix float64[3, 4]` for an
    ndarray subclass or a GPU array, or a scalar's type."""
    if not isinstance(k, tuple):
        return k.__name__
    if k[0] == "static":
        return repr(_static_value(k[1]))
    if isinstance(k[0], type):          # (type, shape, dtype[, device])
        return f"{k[0].__name__} {k[2]}[{', '.join(map(str, k[1]))}]"
    return f"{k[1]}[{', '.join(map(str, k[0]))}]"


def _static_value(c):
    """The value of a static argument's canonical key part (kernel._canonical)."""
    if c[0] == "tuple":
        return tuple(_static_value(x) for x in c[1:])
    if c[0] == "float":
        return float.fromhex(c[1])
    return c[1]


def load(path) -> ExportedFunction:
    """Load a file written by `f.export(path, *example_args)`."""
    with open(path, "rb") as f:          # a missing file is a FileNotFoundError, as usual
        data = f.read()
    return _loads(data, path)


def _loads(data, path):
    """The ExportedFunction of an export file's bytes (path: where they came from, for
    messages)."""
    if data[:8] != MAGIC:
        raise JitdlError(f"{path} is not a jitdl export (bad magic {data[:8]!r})")
    host = engine.target_info()
    have = {f[1:] for f in host["features"].split(",") if f.startswith("+")}
    kernels, name, params, refused = {}, "kernel", None, {}
    try:
        (count,) = struct.unpack_from("<I", data, 8)
        if count == 0:                  # (an export writes one kernel at least)
            raise ValueError("it holds no kernel")
        pos = 12
        for _ in range(count):
            (n,) = struct.unpack_from("<Q", data, pos)
            pos += 8
            if pos + n > len(data):
                raise ValueError(f"truncated: an entry of {n} bytes at offset {pos}, "
                                 f"the file has {len(data)}")
            entry = unpack(data[pos:pos + n])
            pos += n
            meta = entry.meta
            name = meta["fname"]
            params = meta.get("params", params)
            refused.update((key_of_specs(s), (kind, str(m)))
                           for s, kind, m in meta.get("refused", ()))
            need = {f[1:] for f in meta["features"].split(",") if f.startswith("+")}
            missing = sorted(need - have)
            if meta["triple"] != host["triple"]:
                raise JitdlError(f"{path}: exported for {meta['triple']}, this machine is "
                                 f"{host['triple']}")
            if missing:
                raise JitdlError(
                    f"{path}: exported for {meta['cpu']}; this machine ({host['cpu']}) "
                    f"lacks CPU features: {', '.join(missing)}")
            sig = Signature.from_json(meta["signature"])
            if sig.abi > ABI:           # (a calling convention this jitdl does not know)
                raise JitdlError(
                    f"{path}: exported by a newer jitdl (its kernels' calling convention "
                    f"is ABI {sig.abi}; this jitdl, {__version__}, runs ABI {ABI} and "
                    f"older): export it again with this version, or upgrade jitdl")
            why = sig.mismatch(meta["specs"])
            if why:
                raise ValueError(f"an entry's signature does not fit its arguments: {why}")
            kernels[key_of_specs(meta["specs"])] = (sig, meta, entry)
        if pos != len(data):
            raise ValueError(f"{len(data) - pos} bytes after the last entry")
        if params is not None:
            params = _signature(params)
    except JitdlError:
        raise
    except Exception as e:              # struct.error, ValueError, KeyError, TypeError...
        raise JitdlError(f"{path} is damaged: {e}") from None
    loaded_kernels = {}
    for key, (sig, meta, entry) in kernels.items():
        loaded = _load_binary(entry, sig)
        if meta.get("array_data_offset") != engine.array_data_offset():
            loaded.fast_address = 0      # NumPy's layout differs: use the pointer entry
            loaded.direct_address = 0
        loaded_kernels[key] = Kernel(sig, loaded, entry.texts)
    return ExportedFunction(name, loaded_kernels, (data, path), params, refused)


def _load_binary(entry, sig):
    store = default_store()
    try:
        return native.load(entry, sig.symbol, store.root if store else None, sig.fname)
    except RuntimeError as e:
        raise JitdlError(f"a kernel of {sig.fname} in the export does not load: {e}") from None
