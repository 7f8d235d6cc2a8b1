"""Imported only by the hashing pool's fork server (forkserver.context), first of its preloads:
the signature's compiled loops (sigkernels.py) are loaded there once, numba's start-up included
(~0.8 s in a new process), so every worker forked from it starts with them instead of paying that
on its first image.

The fork server ignores SIGINT once its preloads are done (multiprocessing.forkserver); a Ctrl-C
sent to the whole process group while it is still importing would otherwise print its
KeyboardInterrupt traceback under the command's own "interrupted". It is ignored from here on:
the fork server ends when the process that started it does."""

import atexit
import os
import signal
import sys

signal.signal(signal.SIGINT, signal.SIG_IGN)
# The fork server ends when the process that started it does (its pipe's end of file): at once,
# without the interpreter's teardown of NumPy, Pillow and numba (about 0.17 s of one core, during
# which it still holds the command's standard output and error: `rewardhouse dedupe DIR | ...`
# would wait for it). It writes nothing and holds nothing to flush; its workers exit on their own.
# Only in the fork server itself (`python -c "from multiprocessing.forkserver import main; ..."`):
# any other process that imported this module keeps its own exit status.
if sys.argv[:1] == ["-c"] and "multiprocessing.forkserver" in sys.modules:
    atexit.register(os._exit, 0)

from pipeline.dedupe import hashing  # noqa: E402

hashing.warm()
