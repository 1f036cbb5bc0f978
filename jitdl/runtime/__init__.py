"""Runtime: the LLVM JIT engine, the OpenMP thread team, and kernels that run."""
