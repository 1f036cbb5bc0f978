"""The runtime's own compiled helpers (the memory pool's functions) in the disk cache, as
kernels are: stored once, dlopened by later processes. jitdl.runtime.pool calls
`code_store` through its hook, which this module sets when it is imported (with jitdl)."""
from __future__ import annotations

from jitdl.cache import keys
from jitdl.cache.store import Entry, default_store
from jitdl.runtime import native, pool
from jitdl.target import get


def code_store(name, ir_text, symbol, compile_, check):
    """check(the code of the disk cache's entry of jitdl.runtime.<name> for this IR text
    and environment, `symbol` one of its functions) or, where there is none or check
    refuses it (a damaged or foreign entry, e.g. code without the globals the caller
    writes to), check(the code compile_() gives), which is stored (compile_ returns
    (object code, loaded code)) and linked in the background."""
    store = default_store()
    key = keys.digest("jitdl.runtime." + name, ir_text,
                      sorted(keys.environment(get("cpu")).items()))
    entry = store.get(key) if store is not None else None
    if entry is not None:
        try:
            return check(native.load(entry, symbol, store.root, "jitdl.runtime." + name))
        except Exception:
            pass
    obj, loaded = compile_()
    result = check(loaded)
    if store is not None:
        meta = {"fname": "jitdl.runtime." + name, "call": "the runtime's own code"}
        store.put(key, meta, obj, {})
        native.link_later(obj, store.root,
                          lambda shared: store.add_shared(key, Entry(meta, obj, {}), shared))
    return result


pool.code_store = code_store
