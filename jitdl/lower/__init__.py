"""Lowering: TE graph + schedule -> loop IR (bound checks, loop nests, passes)."""
