"""Imported only by the hashing pool's fork server (forkserver.context), first of its preloads:
the signature's compiled loops (sigkernels.py) are loaded there once, numba's start-up included
(~0.8 s in a new process), so every worker forked from it starts with them instead of paying that
on its first image.

The fork server ignores SIGINT once its preloads are done (multiprocessing.forkserver); a Ctrl-C
sent to the whole process group while it is still importing would otherwise print its
KeyboardInterrupt traceback under the command's own "interrupted". It is ignored from here on:
the fork server ends when the process that started it and the workers forked from it have (the
workers end themselves once that process is gone: hashing._orphaned)."""

import atexit
import os
import signal
import sys

signal.signal(signal.SIGINT, signal.SIG_IGN)
# The fork server ends when its last client is gone (its pipe's end of file): at once,
# without the interpreter's teardown of NumPy, Pillow and numba (about 0.17 s of one core, during
# which it still holds the command's standard output and error: `rewardhouse dedupe DIR | ...`
# would wait for it). It writes nothing and holds nothing to flush; its workers exit on their own.
# Only in the fork server itself, which imports this module from multiprocessing.forkserver.main
# (its preloads): any other process that imports it keeps its own exit status.


def _in_fork_server() -> bool:
    from multiprocessing import forkserver

    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is forkserver.main.__code__:
            return True
        frame = frame.f_back
    return False


if _in_fork_server():
    atexit.register(os._exit, 0)

from pipeline.dedupe import hashing  # noqa: E402

hashing.warm()
