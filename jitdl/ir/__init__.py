"""The IR shared by every layer: expression and statement nodes, printer, analysis, simplifier."""
