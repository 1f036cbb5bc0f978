"""The on-disk cache of compiled kernels: keys (what can change a binary) and the store."""
