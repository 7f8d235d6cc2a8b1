"""The `rewardhouse` command's entry point (pyproject's [project.scripts]).

A Ctrl-C while the command's own modules load ends it with one line and exit 130, not a
KeyboardInterrupt traceback from the middle of an import (a SIGTERM then: one line and exit 143,
as later, pipeline.cli.Terminated): the handler that says so is installed
before `pipeline.cli` is imported (this module imports nothing that is not loaded already: the
interpreter's own `_signal`, not `signal`, whose enums take longer to import than the handler is
worth waiting for), and Python's own is put back once it is, for `pipeline.cli.console`, which
handles an interrupt from there on. Before this module runs, Python's start-up (about 0.02 s)
answers a Ctrl-C itself."""

import _signal
import os
import sys


def _interrupted(signum, frame) -> None:
    stopped = signum == _signal.SIGTERM
    sys.stderr.write("rewardhouse: terminated\n" if stopped else "rewardhouse: interrupted\n")
    sys.stderr.flush()
    os._exit(143 if stopped else 130)


def console() -> None:
    previous = {sig: _signal.signal(sig, _interrupted) for sig in (_signal.SIGINT, _signal.SIGTERM)}
    from pipeline import cli

    for sig, handler in previous.items():
        _signal.signal(sig, handler)
    cli.console()
