"""Loop-IR passes: simplify, verify."""
