"""Modules GX imports at start-up but the suites here never use, imported on first use instead.

Importing great_expectations (GX 1.x) imports every core expectation, and one of them (the KL
divergence expectation, with two KS-test metrics) imports scipy.stats and altair at module level
for what it computes and draws when it runs: about 0.6 s and 0.15 s of the 1.9 s GX import, paid
inside the release's GX step although no suite here has such an expectation.

`deferring()` is held around GX's import: while it is, each of those names not imported yet maps
in sys.modules to a stand-in module, which the import statements of GX's modules bind; when it
ends, the stand-ins still unused leave sys.modules, so every other import of those names in the
process, before or after, is an ordinary one. A stand-in's first attribute read (stats.entropy,
alt.Chart) imports the real module (an ordinary import) and hands on its attributes from then on:
GX's KL divergence expectation works as it would, it only pays for the import when it runs.

A name already imported, or not installed, is left alone.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import threading
import types
from typing import Iterator

UNUSED_BY_THE_SUITES = ("scipy.stats", "altair")

_LOCK = threading.RLock()


class Deferred(types.ModuleType):
    """A stand-in for a module not imported yet: reading an attribute it lacks imports the module
    (`load`) and reads it there."""

    def __getattr__(self, attr: str):
        return getattr(load(self), attr)

    def __dir__(self):
        return dir(load(self))

    def __reduce__(self):  # pickled by name, as a module is by cloudpickle
        return importlib.import_module, (self.__name__,)


def load(stand_in: Deferred) -> types.ModuleType:
    """The real module behind a stand-in, imported (an ordinary import) on the first call."""
    real = stand_in.__dict__.get("_deferred_real")
    if real is not None:
        return real
    name = stand_in.__name__
    with _LOCK:
        real = stand_in.__dict__.get("_deferred_real")
        if real is None:
            if sys.modules.get(name) is stand_in:  # used while GX is being imported
                del sys.modules[name]
            try:
                real = importlib.import_module(name)
            except BaseException:
                if name not in sys.modules and _STAND_INS.get(name) is stand_in:
                    sys.modules[name] = stand_in
                raise
            stand_in.__dict__["_deferred_real"] = real
    return real


_STAND_INS: dict[str, Deferred] = {}  # the stand-ins in sys.modules, while deferring() is held


@contextlib.contextmanager
def deferring(names: tuple[str, ...] = UNUSED_BY_THE_SUITES) -> Iterator[list[str]]:
    """While held, each of `names` not imported yet (and installed) is a stand-in in sys.modules;
    yields those names. On leaving, the stand-ins not used meanwhile leave sys.modules (they stay
    where an import bound them)."""
    done = []
    with _LOCK:
        for name in names:
            if name in sys.modules:
                continue
            try:
                spec = importlib.util.find_spec(name)  # imports a dotted name's parent package, not the name
            except (ImportError, ValueError):
                spec = None
            if spec is None:
                continue
            stand_in = Deferred(name)
            # what scans of sys.modules read (inspect.getmodule, warnings) without importing it
            stand_in.__spec__, stand_in.__loader__, stand_in.__file__ = spec, spec.loader, spec.origin
            sys.modules[name] = _STAND_INS[name] = stand_in
            done.append(name)
    try:
        yield done
    finally:
        with _LOCK:
            for name in done:
                stand_in = _STAND_INS.pop(name)
                if sys.modules.get(name) is stand_in:
                    del sys.modules[name]


def deferred(module: object) -> bool:
    """Whether `module` is a stand-in whose real module has not been imported through it."""
    return isinstance(module, Deferred) and "_deferred_real" not in module.__dict__
