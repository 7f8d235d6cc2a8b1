"""Sensors: refresh when upstream changes, and say so when a run fails.

`upstream_change_sensor` polls the heads of the upstream repositories (pipeline/upstream.py) and
requests a `refresh` run only when a file the `hf` source reads has changed. What it last saw is
its cursor, a JSON document Dagster stores in the instance, so it survives restarts of the
daemon. The run it requests pins the new revisions through the `rewardhouse` resource (the `hf`
source otherwise keeps using the revisions locked in raw/hf/sources.lock.json).

`run_failure_notifier` logs every failed run of the instance and hands a one-line message
to `notify`, which runs `REWARDHOUSE_NOTIFY_COMMAND` (if set) with the message on stdin.

`dead_run_reaper` cleans up after runs whose processes died (pipeline/runs.py) while the daemon
is up; `rewardhouse run` does the same before it starts.
"""

from __future__ import annotations

import json
import shlex
import subprocess

import dagster as dg

from pipeline import env
from pipeline.resources import RewardhouseResource
from pipeline.runs import reap_dead_runs
from pipeline.schedules import REFRESH_JOB, all_partitions_tags, automation_on
from pipeline.upstream import PIN_FIELDS, content_digest, errors, revisions_digest, upstream_revisions

DEFAULT_POLL_SECONDS = 3600
NOTIFY_TIMEOUT_SECONDS = 60

# PIN_FIELDS (from the registry): upstream repo -> the `rewardhouse` resource field that pins a run
# to a revision of it. A field the resource does not (yet) have is left out of the run config; that
# run uses the locked revision.


def _poll_seconds() -> int:
    return env.upstream_poll_seconds(DEFAULT_POLL_SECONDS)


def _read_cursor(cursor: str | None) -> dict | None:
    if not cursor:
        return None
    try:
        state = json.loads(cursor)
    except ValueError:
        return None
    return state if isinstance(state, dict) and "digest" in state else None


def _changed(previous: dict | None, heads: dict) -> list[str]:
    """The upstreams whose content differs from the cursor's (all of them on a first look)."""
    if previous is None:
        return sorted(heads)
    before = previous.get("heads", {})
    return sorted(repo for repo in heads if content_digest({repo: heads[repo]}) != content_digest({repo: before.get(repo, {})}))


def pinned_run_config(resource: RewardhouseResource, heads: dict) -> dict:
    """The resource's own settings plus the revisions to pin. The whole config is passed because
    run config replaces the resource's configured values (an omitted `source` would fall back to
    the class default, `sample`), not just the fields it names."""
    fields = type(resource).model_fields
    pins = {PIN_FIELDS[repo]: head["revision"] for repo, head in heads.items()
            if PIN_FIELDS.get(repo) in fields and head.get("revision")}
    # Hub datasets without a field of their own pin through `hf_revisions` (repo -> revision).
    generic = {repo: head["revision"] for repo, head in heads.items()
               if repo not in PIN_FIELDS and head.get("kind") == "hf" and head.get("revision")}
    if generic and "hf_revisions" in fields:
        pins["hf_revisions"] = {**resource.hf_revisions, **generic}
    if not pins:
        return {}
    config = {k: v for k, v in resource.model_dump().items() if v is not None}
    return {"resources": {"rewardhouse": {"config": {**config, **pins}}}}


@dg.sensor(
    job_name=REFRESH_JOB,
    minimum_interval_seconds=_poll_seconds(),
    default_status=dg.DefaultSensorStatus.RUNNING if automation_on() else dg.DefaultSensorStatus.STOPPED,
    description="Requests a refresh run when the Hub datasets' data files or the MMRB2 GitHub head change "
    "(hf source only); polls every REWARDHOUSE_UPSTREAM_POLL_SECONDS (default 3600).",
)
def upstream_change_sensor(context: dg.SensorEvaluationContext, rewardhouse: RewardhouseResource):
    if rewardhouse.source != "hf":
        # sample is generated offline and local is a folder the user updates: upstream heads
        # say nothing about what a run would read, and polling them would be wasted requests.
        return dg.SkipReason(f"source is {rewardhouse.source!r}, not 'hf': upstream revisions do not apply")

    heads = upstream_revisions()
    failed = errors(heads)
    if failed:
        # The cursor stays as it was, so the next poll compares against the last complete view.
        return dg.SkipReason("upstream not readable, will retry: " + "; ".join(f"{repo}: {msg}" for repo, msg in sorted(failed.items())))

    previous = _read_cursor(context.cursor)
    digest = content_digest(heads)
    changed = _changed(previous, heads)
    state = {"digest": digest, "heads": heads}
    if previous is not None and previous["digest"] == digest:
        if previous.get("heads") != heads:
            context.update_cursor(json.dumps(state, sort_keys=True))  # commits moved, data files did not
        return dg.SkipReason("upstream unchanged: " + ", ".join(f"{r}@{h['revision'][:12]}" for r, h in sorted(heads.items())))

    run_config = pinned_run_config(rewardhouse, heads)
    if not run_config:
        context.log.warning(
            "the rewardhouse resource has no revision fields to pin; the requested run uses the "
            "revisions locked in raw/hf/sources.lock.json"
        )
    context.log.info("upstream changed: " + ", ".join(f"{r}@{heads[r]['revision']}" for r in changed))
    context.update_cursor(json.dumps(state, sort_keys=True))
    return dg.RunRequest(
        run_key=revisions_digest(heads),
        run_config=run_config,
        tags={"rewardhouse/trigger": "upstream-change", **all_partitions_tags()},
    )


def notify(message: str) -> None:
    """Hook for failure notifications. Runs `REWARDHOUSE_NOTIFY_COMMAND` (split like a shell
    would split it, but never run through one) with the message on stdin; does nothing when it is
    unset. Raises RuntimeError when the command fails. Replace it to notify some other way."""
    command = env.notify_command()
    if not command:
        return
    argv = shlex.split(command)
    try:
        done = subprocess.run(argv, input=message, text=True, capture_output=True, timeout=NOTIFY_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"notify command {argv[0]!r} did not run: {exc}") from exc
    if done.returncode != 0:
        raise RuntimeError(f"notify command {argv[0]!r} exited with {done.returncode}: {done.stderr.strip()[:300]}")


def failure_message(context: dg.RunFailureSensorContext) -> str:
    run = context.dagster_run
    steps = []
    for event in context.get_step_failure_events():
        error = event.step_failure_data.error if event.step_failure_data else None
        if error is not None:
            # Step errors wrap the user's exception; its cause carries the message worth reading.
            while error.cause is not None and error.cls_name == "DagsterExecutionStepExecutionError":
                error = error.cause
            steps.append(f"{event.step_key}: {error.message.strip()}")
    detail = "; ".join(steps) or (context.failure_event.message or "no error recorded")
    return f"rewardhouse run {run.run_id} of job {run.job_name} failed: {detail}"


# Every run of the instance, not only this code location's: `rewardhouse run` executes in process,
# and such runs carry no code-location origin, so the default filter would never match them. The
# instance (DAGSTER_HOME under the data root) belongs to this project alone.
@dg.run_failure_sensor(
    monitor_all_code_locations=True,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Logs every failed run of the instance (UI and `rewardhouse run`) and calls the notify hook "
    "(REWARDHOUSE_NOTIFY_COMMAND).",
)
def run_failure_notifier(context: dg.RunFailureSensorContext):
    message = failure_message(context)
    context.log.error(message)
    try:
        notify(message)
    except Exception as exc:  # noqa: BLE001 - a broken notifier must not hide the failure itself
        context.log.warning(f"notification failed: {exc}")


REAP_INTERVAL_SECONDS = 10


@dg.sensor(
    minimum_interval_seconds=REAP_INTERVAL_SECONDS,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Finds runs whose processes died (killed, OOM, reboot), marks them failed and frees their pool "
    "slots, so the run queue and the `warehouse` pool never stay blocked by a dead run (pipeline/runs.py).",
)
def dead_run_reaper(context: dg.SensorEvaluationContext):
    lines = reap_dead_runs(context.instance, by="the dead_run_reaper sensor")
    for line in lines:
        context.log.warning(line)
    return dg.SkipReason("; ".join(lines) if lines else "every run in flight is alive")
