"""Modules GX imports at start-up but the suites here never use, imported on first use instead.

Importing great_expectations (GX 1.x) imports every core expectation, and one of them (the KL
divergence expectation, with two KS-test metrics) imports scipy.stats and altair at module level
for what it computes and draws when it runs: about 0.6 s and 0.15 s of the 1.9 s GX import, paid
inside the release's GX step although no suite here has such an expectation. `defer()`, called
before GX is first imported, puts a stand-in module under each name in sys.modules; the import
statements that name it bind the stand-in, and the first read of any attribute (stats.entropy,
alt.Chart, a submodule's __path__) imports the real module, which then replaces the stand-in in
sys.modules and under its parent package. What runs is unchanged; only when it is imported moves.

A name already imported, or not installed, is left alone.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types

UNUSED_BY_THE_SUITES = ("scipy.stats", "altair")

_LOCK = threading.RLock()


class Deferred(types.ModuleType):
    """A stand-in for a module not imported yet: reading an attribute it lacks imports the module."""

    def __getattr__(self, attr: str):
        return getattr(load(self), attr)


def load(stand_in: Deferred) -> types.ModuleType:
    """The real module behind a stand-in, imported on the first call."""
    real = stand_in.__dict__.get("_deferred_real")
    if real is not None:
        return real
    name = stand_in.__name__
    with _LOCK:
        real = stand_in.__dict__.get("_deferred_real")
        if real is None:
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]
            try:
                real = importlib.import_module(name)
            except BaseException:
                sys.modules.setdefault(name, stand_in)
                raise
            stand_in.__dict__["_deferred_real"] = real
    return real


def defer(names: tuple[str, ...] = UNUSED_BY_THE_SUITES) -> list[str]:
    """Put a stand-in under each of `names` not imported yet (and installed); returns those deferred."""
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
            # what scans of sys.modules read (inspect.getmodule, warnings) without importing it; no
            # __path__: a submodule's import reads it, and that imports the package first
            stand_in.__spec__, stand_in.__loader__, stand_in.__file__ = spec, spec.loader, spec.origin
            sys.modules[name] = stand_in
            done.append(name)
    return done


def deferred(name: str) -> bool:
    """Whether `name` is still a stand-in (not imported)."""
    module = sys.modules.get(name)
    return isinstance(module, Deferred) and "_deferred_real" not in module.__dict__
