"""Imported only by the hashing pool's fork server (hashing._pool_context), first of its preloads:
the signature's compiled loops (sigkernels.py) are loaded there once, numba's start-up included
(~0.8 s in a new process), so every worker forked from it starts with them instead of paying that
on its first image.

The fork server ignores SIGINT once its preloads are done (multiprocessing.forkserver); a Ctrl-C
sent to the whole process group while it is still importing would otherwise print its
KeyboardInterrupt traceback under the command's own "interrupted". It is ignored from here on:
the fork server ends when the process that started it does."""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)

from pipeline.dedupe import hashing  # noqa: E402

hashing.warm()
