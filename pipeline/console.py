"""The `rewardhouse` command's entry point (pyproject's [project.scripts]).

A Ctrl-C while the command's own modules load ends it with one line and exit 130, not a
KeyboardInterrupt traceback from the middle of an import: the handler that says so is installed
before `pipeline.cli` is imported (this module imports nothing that is not loaded already: the
interpreter's own `_signal`, not `signal`, whose enums take longer to import than the handler is
worth waiting for), and Python's own is put back once it is, for `pipeline.cli.console`, which
handles an interrupt from there on. Before this module runs, Python's start-up (about 0.02 s)
answers a Ctrl-C itself."""

import _signal
import os
import sys


def _interrupted(signum, frame) -> None:
    sys.stderr.write("rewardhouse: interrupted\n")
    sys.stderr.flush()
    os._exit(130)


def console() -> None:
    previous = _signal.signal(_signal.SIGINT, _interrupted)
    from pipeline import cli

    _signal.signal(_signal.SIGINT, previous)
    cli.console()
