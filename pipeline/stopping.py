"""Stopping a run politely: SIGTERM/SIGINT stop it at a safe point, a second signal at once.

Inside a Dagster run, Dagster's own handler raises an interrupt in the step's code wherever it
stands, and the run ends CANCELED if its status was CANCELING by then (else FAILURE). Added here:

- `critical_section()`: a block an interrupt must not split (publishing a release). A stop that
  arrives inside it is held and delivered when the block ends; a second signal ends the process
  at once, which the release store survives like any crash.
- `SignalOwner` (the `rewardhouse run` process): SIGTERM and SIGINT go through it whatever the
  process inherited (a background job starts with them ignored) and whatever handler Dagster has
  installed. The first one is announced in one line and, from a helper thread, marks the run
  CANCELING; the run then stops at the next `stop_point()` (an asset starting, a progress report,
  a wait), or where it stands if it reaches none within FORCE_AFTER_SECONDS, and ends canceled,
  never as an "unexpected" failure. A second one cleans up what it can within a few seconds and
  exits.
  Dagster installs its handlers through `dagster._utils.interrupts._replace_interrupt_signal`;
  while a SignalOwner is active, the handlers it installs are wrapped (tested in
  tests/test_run_stop.py, so a Dagster upgrade that changes this fails loudly).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Callable, Iterator

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# A second signal still gets this long to mark the run canceled and free its slots.
HARD_STOP_GRACE_SECONDS = 3.0
# A run that reaches no stop point this long after the first signal is interrupted where it stands.
FORCE_AFTER_SECONDS = 6.0

_owner: "SignalOwner | None" = None


class Stopped(KeyboardInterrupt):
    """A stop asked for by a signal, raised at a stop point in the main thread of `rewardhouse
    run`. A KeyboardInterrupt, so a Dagster step that raises it ends as interrupted and the run
    (marked CANCELING first) as canceled; outside a run, the command catches it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def stop_point() -> None:
    """A place where stopping is safe: raise Stopped if a stop was asked for (only ever in the
    main thread of a `rewardhouse run`, never inside a critical section). Called where work
    starts or advances: an asset asking for its settings, a progress report, a waiting loop."""
    owner = _owner
    if owner is not None and owner.requested and not owner._depth and _in_main_thread():
        owner.reached.set()
        raise Stopped(owner.received or signal.SIGTERM)


@contextlib.contextmanager
def critical_section() -> Iterator[None]:
    """Hold a stop until the block is done, then deliver it through the handler in place (inside a
    Dagster step: raise its interrupt). A second signal inside the block exits the process."""
    if not _in_main_thread():
        yield
        return
    if _owner is not None:
        with _owner.deferred():
            yield
        return
    held: list[int] = []

    def hold(signum, _frame):
        if held:
            print(f"rewardhouse: second {signal.Signals(signum).name}: stopping now", file=sys.stderr, flush=True)
            os._exit(128 + signum)
        held.append(signum)

    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        signal.signal(sig, hold)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if held:
        handler = previous[held[0]]
        if callable(handler):
            handler(held[0], None)
        elif handler == signal.SIG_DFL:
            signal.raise_signal(held[0])


class SignalOwner:
    """Owns SIGTERM/SIGINT for `rewardhouse run` (see the module docstring), as a context manager
    around the command. `on_first(signum)` and `on_second(signum)` run in helper threads."""

    def __init__(self, on_first: Callable[[int], None], on_second: Callable[[int], None]):
        self.on_first, self.on_second = on_first, on_second
        self.received: int | None = None
        self.requested = False  # stop points raise from now on
        self.reached = threading.Event()  # a stop point raised
        self._count = 0
        self._armed = False  # the next handler call is the stop being delivered, not a new signal
        self._depth = 0  # critical sections entered
        self._previous: dict = {}
        self._dagster = None

    # -- installation -------------------------------------------------------------------------
    def __enter__(self) -> "SignalOwner":
        global _owner
        if not _in_main_thread():
            return self
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.getsignal(sig)
            signal.signal(sig, self._outside)
        try:
            import dagster._utils.interrupts as interrupts
        except ImportError:  # pragma: no cover - Dagster is a dependency
            interrupts = None
        if interrupts is not None:
            self._dagster = (interrupts, interrupts._replace_interrupt_signal)
            interrupts._replace_interrupt_signal = self._replace
        _owner = self
        return self

    def __exit__(self, *exc) -> None:
        global _owner
        if not self._previous:
            return
        self.reached.set()  # the command is over: no forced stop after it
        _owner = None
        if self._dagster:
            module, original = self._dagster
            module._replace_interrupt_signal = original
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _replace(self, handler) -> None:
        """Dagster installing `handler` for SIGINT (and SIGTERM): install it behind the gate."""
        _module, original = self._dagster
        original(self._gate(handler))

    def _gate(self, handler):
        if not callable(handler) or getattr(handler, "_rewardhouse_gate", False):
            return handler

        def gated(signum, frame):
            return self._on(signum, frame, handler)

        gated._rewardhouse_gate = True  # type: ignore[attr-defined]
        return gated

    def _outside(self, signum, frame):
        def stop(_signum, _frame):
            raise Stopped(self.received or signum)

        return self._on(signum, frame, stop)

    _outside._rewardhouse_gate = True  # type: ignore[attr-defined]

    # -- behaviour ----------------------------------------------------------------------------
    def _on(self, signum, frame, deliver):
        if self._armed:  # the forced stop, arriving in the main thread
            self._armed = False
            if self._depth:
                return None  # a critical section is under way: its end is the stop point
            return deliver(signum, frame)
        self._count += 1
        if self._count == 1:
            self.received = signum
            threading.Thread(target=self._first, args=(signum,), name="stop request", daemon=True).start()
            return None
        self._hard(signum)

    def _first(self, signum: int) -> None:
        try:
            self.on_first(signum)
        finally:
            self.requested = True
        if not self.reached.wait(FORCE_AFTER_SECONDS) and self._count == 1 and _owner is self:
            self._armed = True
            # A real signal, so a main thread blocked in a sleep or a read wakes up for it.
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    def _hard(self, signum: int) -> None:
        """Exit from helper threads, after `on_second` or after the grace, whichever comes first.
        The main thread is not held meanwhile: it may hold the very database lock the cleanup
        needs, and it is about to die anyway."""

        def clean_then_exit() -> None:
            try:
                self.on_second(signum)
            finally:
                os._exit(128 + signum)

        def deadline() -> None:
            threading.Event().wait(HARD_STOP_GRACE_SECONDS)
            os._exit(128 + signum)

        threading.Thread(target=deadline, name="hard stop deadline", daemon=True).start()
        threading.Thread(target=clean_then_exit, name="hard stop", daemon=True).start()

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        stop_point()  # the block is done: stop here if asked to
