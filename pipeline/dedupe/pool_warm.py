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

# In the fork server, SIGINT is ignored first (before the imports below). And the fork server
# ends when its last client is gone (its pipe's end of file): at once, without the interpreter's
# teardown of NumPy, Pillow and numba (about 0.17 s of one core, during which it still holds the
# command's standard output and error: `rewardhouse dedupe DIR | ...` would wait for it). It writes
# nothing and holds nothing to flush; its workers exit on their own. Only in the fork server
# itself, which imports this module from multiprocessing.forkserver.main (its preloads): any other
# process that imports it keeps its own Ctrl-C (an ignored SIGINT is inherited by every process it
# starts) and its own exit status.


def _in_fork_server() -> bool:
    from multiprocessing import forkserver

    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is forkserver.main.__code__:
            return True
        frame = frame.f_back
    return False


def _lost_pool(kind, tb) -> bool:
    """Is this the error of a worker forked while its pool was being torn down (a second Ctrl-C
    while the first winds the command down): the pool's semaphores, which the worker reads from
    its parent's message, already unlinked (FileNotFoundError in multiprocessing.synchronize's
    SemLock.__setstate__)? There is no pool left to join and nothing to report."""
    if not issubclass(kind, FileNotFoundError):
        return False
    last = None
    while tb is not None:
        last, tb = tb.tb_frame, tb.tb_next
    return (last is not None and last.f_code.co_name == "__setstate__"
            and last.f_code.co_filename.replace(os.sep, "/").endswith("multiprocessing/synchronize.py"))


def quiet_lost_pool(kind, value, tb, _previous=sys.excepthook) -> None:
    """The fork server's children report an error that ends them through sys.excepthook, on the
    command's standard error: a traceback under the command's own "interrupted", unless it is
    _lost_pool's."""
    if not _lost_pool(kind, tb):
        _previous(kind, value, tb)


if _in_fork_server():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    atexit.register(os._exit, 0)
    sys.excepthook = quiet_lost_pool  # inherited by every child it forks

from pipeline.dedupe import hashing  # noqa: E402

hashing.warm()
