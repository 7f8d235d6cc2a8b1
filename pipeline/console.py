"""The `rewardhouse` command's entry point (pyproject's [project.scripts]).

A Ctrl-C while the command's own modules load ends it with one line and exit 130, not a
KeyboardInterrupt traceback from the middle of an import: the handler that says so is installed
before `pipeline.cli` is imported (this module imports nothing else), and Python's own is put back
once it is, for `pipeline.cli.console`, which handles an interrupt from there on."""

import os
import signal
import sys


def _interrupted(signum, frame) -> None:
    sys.stderr.write("rewardhouse: interrupted\n")
    sys.stderr.flush()
    os._exit(130)


def console() -> None:
    previous = signal.signal(signal.SIGINT, _interrupted)
    from pipeline import cli

    signal.signal(signal.SIGINT, previous)
    cli.console()
