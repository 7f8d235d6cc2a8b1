"""Whether this process runs a whole job: `rewardhouse run` executes every step of the job in its
own process (Dagster's in-process executor), so what a later step will need can be prepared while
the earlier steps run (the Dagster glue asks `whole_job()` before it starts such work). Off by
default: a process that runs one step (a run from the UI, a process per step) would prepare it
for nothing."""

from __future__ import annotations

_WHOLE_JOB = False


def set_whole_job(on: bool = True) -> None:
    global _WHOLE_JOB
    _WHOLE_JOB = on


def whole_job() -> bool:
    return _WHOLE_JOB
