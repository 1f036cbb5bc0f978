"""Capture: from a Python function to a TE graph (AST transform, then symbolic tracing)."""
