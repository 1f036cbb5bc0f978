"""Targets: what jitdl compiles for. A target owns its environment (what enters cache
keys), its policies (vector width, registers, cache sizes, limits on local buffers) and
its automatic scheduler; the pipeline picks the codegen and runtime of its kind.

    target.get("cpu")      the host CPU, read from the machine (cached)
    target.get("cuda")     the current GPU through CuPy; an sm_90 device for generating
                           code where there is none
"""
from __future__ import annotations

from jitdl.errors import ArgumentError

KINDS = ("cpu", "cuda")


def get(name):
    """The target called `name` ("cpu" or "cuda"), or a Target as is."""
    if not isinstance(name, str):
        return name
    if name == "cpu":
        from jitdl.target.cpu import host     # lazy: reading the host starts LLVM
        return host()
    if name == "cuda":
        from jitdl.target.cuda import device      # lazy: asking for a GPU loads CUDA
        return device()
    raise ArgumentError(f"unknown target {name!r}; targets: {', '.join(KINDS)}")
