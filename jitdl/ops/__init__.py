"""The op library's definitions: TE builders with NumPy 2 semantics (broadcasting, NEP 50
promotion, axis/keepdims). Each builder takes tensors and scalar expressions of a
definition and returns tensors; `jitdl.numpy` and `jitdl.nn` call them on the tensors of a
definition (the stages join it) or wrap them in a compiled kernel for arrays."""
