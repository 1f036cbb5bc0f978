"""Tensor expressions: tensors, compute stages, reduce axes and the user-facing builders."""
