"""The hashing pool's start method, and its fork server started early, without NumPy or Pillow.

`rewardhouse dedupe DIR` starts the fork server (`start`) before it imports anything it hashes
with: the fork server's preloads (pool_warm: the signature's compiled loops, about 0.7 s of one
core in a new process) run on one core while this process imports the rest and lists the images
on the other."""

from __future__ import annotations

import multiprocessing
import signal
import threading

# workers fork with the compiled loops loaded; pool_warm first: it ignores SIGINT before the imports
PRELOAD = ["pipeline.dedupe.pool_warm", "pipeline.dedupe.hashing"]
SMALL_BATCH = 256  # below this many images a worker pool costs more to start than it saves (hashing)


def context():
    """The hashing pool's multiprocessing context. Not fork: the Dagster step that hashes runs
    threads, and forking a threaded process can deadlock. The fork server imports hashing once,
    so each pool still starts in ~0.2 s."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def start() -> None:
    """Start the hashing pool's fork server now, when the pool is sure to come: it gets ready while
    this process does what comes before the first image (imports, listing the images) instead of
    after. Nothing where the pool does not use a fork server; a fork server that cannot start here
    is left to the pool's own start, which reports why."""
    if context().get_start_method() != "forkserver":
        return
    from multiprocessing import forkserver, resource_tracker

    # The fork server starts with SIGINT blocked (the spawning thread's signal mask stays across
    # fork and exec, and Python does not touch it) until it ignores SIGINT, first thing in its
    # preloads (pool_warm.py): a Ctrl-C to the process group in its first second would otherwise
    # print its KeyboardInterrupt traceback under this command's "interrupted". Meanwhile a Ctrl-C
    # is held, never ignored (which would lose it): kept pending by the mask in this thread, noted
    # by a handler of its own when another thread of this process takes it, and handed to the
    # handler that was in place once the fork server is spawned (a few milliseconds). The resource
    # tracker is started first, as its own start unblocks SIGINT (multiprocessing.resource_tracker).
    try:
        resource_tracker.ensure_running()
    except Exception:  # noqa: BLE001 - the pool starts it again and fails with the reason
        return
    main = threading.current_thread() is threading.main_thread()
    held: list[int] = []
    if main:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        forkserver.ensure_running()
    except Exception:  # noqa: BLE001 - the pool starts it again and fails with the reason
        pass
    finally:
        if main:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)  # one pending here is noted now
            signal.signal(signal.SIGINT, previous)
            if held:
                signal.raise_signal(signal.SIGINT)
