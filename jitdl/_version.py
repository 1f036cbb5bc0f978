"""jitdl's version (one place; cache keys include it)."""
__version__ = "0.1.0"
