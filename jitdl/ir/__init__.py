"""The IR shared by every layer: expression and statement nodes, printer, analysis, simplifier."""
from jitdl.ir import build as _build  # noqa: F401  (puts Python's operators on the nodes)
