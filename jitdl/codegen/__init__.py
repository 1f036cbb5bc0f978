"""Code generation: loop IR -> LLVM IR (CPU)."""
