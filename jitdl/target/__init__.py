"""Targets: what jitdl compiles for. A target owns its environment (what enters cache
keys), its policies (vector width, registers, cache sizes, limits on local buffers) and
its automatic scheduler; the pipeline picks the codegen and runtime of its kind.

    target.get("cpu")      the host CPU, read from the machine (cached)
"""
from __future__ import annotations

from jitdl.errors import ArgumentError

KINDS = ("cpu", "cuda")


def get(name):
    """The target called `name` ("cpu"; "cuda" is not built yet), or a Target as is."""
    if not isinstance(name, str):
        return name
    if name == "cpu":
        from jitdl.target.cpu import host     # lazy: reading the host starts LLVM
        return host()
    if name == "cuda":
        raise ArgumentError("target 'cuda': the CUDA target is not built yet; pass NumPy "
                            "arrays (e.g. cupy.asnumpy(x)) to run on the CPU")
    raise ArgumentError(f"unknown target {name!r}; targets: {', '.join(KINDS)}")
