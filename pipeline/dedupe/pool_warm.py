"""Imported only by the hashing pool's fork server (hashing._pool_context): the signature's compiled
loops (sigkernels.py) are loaded there once, numba's start-up included (~0.8 s in a new process),
so every worker forked from it starts with them instead of paying that on its first image."""

from pipeline.dedupe import hashing

hashing.warm()
