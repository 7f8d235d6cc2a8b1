"""The nightly schedule, the upstream change sensor and the run-failure notifier.

The sensor reads the loopback FakeHub (Hugging Face) and a small GitHub-API stand-in below; no
test touches the network.
"""

from __future__ import annotations

import json
import subprocess
import shlex
import sys
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import dagster as dg
import pytest

from pipeline import datasets, sensors
from pipeline.resources import RewardhouseResource
from pipeline.schedules import nightly_schedule
from pipeline.sensors import run_failure_notifier, upstream_change_sensor
from pipeline.upstream import upstream_revisions

IMAGES = "facebook/MMRB2_image"
VISUALPRM = "mm-eval/VisualPRM400K"
VLRB = "MMInstruction/VL-RewardBench"
VLRB_SHARD = "data/test-00000-of-00001.parquet"
ANNOTATIONS = "facebookresearch/MMRB2"
SHARD = "data/train-00000-of-00001.parquet"


# --- a GitHub REST API stand-in: GET /repos/{owner}/{repo}/commits/HEAD ----------------------------


class FakeGitHub:
    """Answers `commits/HEAD` for one repo with `sha` (bare, as for Accept: application/vnd.github.sha);
    `status` other than 200 makes it fail like an outage or a rate limit."""

    def __init__(self, repo: str, sha: str):
        self.repo, self.sha, self.status, self.accepts = repo, sha, 200, []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                fake.accepts.append(self.headers.get("Accept"))
                if fake.status != 200:
                    body, status = b'{"message": "API rate limit exceeded"}', fake.status
                elif self.path == f"/repos/{fake.repo}/commits/HEAD":
                    body, status = fake.sha.encode(), 200
                else:
                    body, status = b'{"message": "Not Found"}', 404
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstream(hub, monkeypatch):
    """FakeHub with both Hub datasets on main, and the GitHub stand-in for the annotation repo."""
    hub.add_dataset_commit(IMAGES, {"image.zip": b"zip v1", "README.md": b"# images"})
    hub.add_dataset_commit(VISUALPRM, {SHARD: b"PAR1 shard v1", "README.md": b"# prm"})
    hub.add_dataset_commit(VLRB, {VLRB_SHARD: b"PAR1 vlrb v1", "README.md": b"# vlrb"})
    for spec in datasets.DATASETS:  # every other Hub repo of the registry: one stand-in shard
        for up in spec.upstream:
            if up.kind == "hf" and up.repo not in (IMAGES, VISUALPRM, VLRB):
                hub.add_dataset_commit(up.repo, {up.files.replace("*", "000"): f"PAR1 {up.repo}".encode()})
    github = FakeGitHub(ANNOTATIONS, "a" * 40)
    monkeypatch.setenv("REWARDHOUSE_GITHUB_API", github.url)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    yield hub, github
    github.close()


def evaluate(cursor: str | None, *, source: str = "hf", resource: RewardhouseResource | None = None):
    """One sensor tick in a context built from a cursor string only, as after a daemon restart."""
    context = dg.build_sensor_context(
        cursor=cursor,
        instance=dg.DagsterInstance.ephemeral(),
        resources={"rewardhouse": resource or RewardhouseResource(source=source)},
    )
    return upstream_change_sensor(context), context.cursor


# --- the schedule ---------------------------------------------------------------------------------


def test_nightly_refresh_runs_the_refresh_job_at_two_utc_and_is_off_by_default(monkeypatch):
    monkeypatch.delenv("REWARDHOUSE_NIGHTLY_CRON", raising=False)
    monkeypatch.delenv("REWARDHOUSE_SCHEDULES_ON", raising=False)
    schedule = nightly_schedule()
    assert (schedule.cron_schedule, schedule.execution_timezone, schedule.job_name) == ("0 2 * * *", "UTC", "refresh")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED

    context = dg.build_schedule_context(scheduled_execution_time=datetime(2025, 3, 4, 2, 0, tzinfo=timezone.utc))
    (request,) = schedule.evaluate_tick(context).run_requests
    # No run config: the run takes the resource as the environment configures it (REWARDHOUSE_SOURCE).
    assert request.run_config == {}
    assert request.tags["rewardhouse/trigger"] == "nightly"
    # One run over every MMRB2 task partition.
    assert (request.tags["dagster/asset_partition_range_start"], request.tags["dagster/asset_partition_range_end"]) == ("t2i", "reasoning")


def test_nightly_refresh_cron_and_status_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("REWARDHOUSE_NIGHTLY_CRON", "30 4 * * 1")
    monkeypatch.setenv("REWARDHOUSE_SCHEDULES_ON", "1")
    schedule = nightly_schedule()
    assert schedule.cron_schedule == "30 4 * * 1"
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING


def test_definitions_hold_the_schedule_and_sensors_on_the_refresh_job():
    from pipeline.definitions import defs

    assert defs.resolve_schedule_def("nightly_refresh").job_name == "refresh"
    assert defs.resolve_sensor_def("upstream_change_sensor").job_name == "refresh"
    notifier = defs.resolve_sensor_def("run_failure_notifier")  # a run-status sensor on failures
    assert isinstance(notifier, dg.RunStatusSensorDefinition) and notifier._run_status == dg.DagsterRunStatus.FAILURE


# --- upstream revisions (pure) ----------------------------------------------------------------------


def test_upstream_revisions_reads_hub_commits_file_etags_and_the_github_head(upstream):
    hub, github = upstream
    heads = upstream_revisions()
    assert heads[IMAGES]["kind"] == "hf" and len(heads[IMAGES]["revision"]) == 40
    # Only the files the hf source downloads, with the Hub's ETag (sha256 for LFS files).
    import hashlib

    assert heads[IMAGES]["files"] == {"image.zip": hashlib.sha256(b"zip v1").hexdigest()}
    assert heads[VISUALPRM]["files"] == {SHARD: hashlib.sha256(b"PAR1 shard v1").hexdigest()}
    assert heads[VLRB]["files"] == {VLRB_SHARD: hashlib.sha256(b"PAR1 vlrb v1").hexdigest()}  # every registry dataset
    assert heads[ANNOTATIONS] == {"kind": "github", "revision": "a" * 40}
    assert github.accepts == ["application/vnd.github.sha"]


def test_upstream_revisions_reports_a_failure_per_upstream_and_never_raises(upstream):
    hub, github = upstream
    github.status = 403
    heads = upstream_revisions(hf_endpoint="http://127.0.0.1:9", timeout=2)  # nothing listens on port 9
    assert set(heads) == {u.repo for d in datasets.DATASETS for u in d.upstream}  # every upstream of the registry
    assert "HTTP 403" in heads[ANNOTATIONS]["error"]
    assert IMAGES in heads[IMAGES]["error"] and "127.0.0.1:9" in heads[IMAGES]["error"]


# --- the upstream change sensor -----------------------------------------------------------------------


def test_sensor_requests_a_run_first_then_skips_while_upstream_is_unchanged(upstream):
    first, cursor = evaluate(None)
    assert isinstance(first, dg.RunRequest) and first.run_key
    assert first.tags["rewardhouse/trigger"] == "upstream-change"
    assert (first.tags["dagster/asset_partition_range_start"], first.tags["dagster/asset_partition_range_end"]) == ("t2i", "reasoning")
    state = json.loads(cursor)
    assert state["heads"][ANNOTATIONS]["revision"] == "a" * 40

    # A new context from the stored cursor string only: what the daemon has after a restart.
    second, cursor_after = evaluate(cursor)
    assert isinstance(second, dg.SkipReason)
    assert "unchanged" in second.skip_message
    assert cursor_after == cursor


def test_sensor_requests_a_new_run_when_a_hub_data_file_changes(upstream):
    hub, _ = upstream
    first, cursor = evaluate(None)
    new_sha = hub.add_dataset_commit(VISUALPRM, {SHARD: b"PAR1 shard v2", "README.md": b"# prm"})

    moved, cursor_after = evaluate(cursor)
    assert isinstance(moved, dg.RunRequest)
    assert moved.run_key != first.run_key
    assert json.loads(cursor_after)["heads"][VISUALPRM]["revision"] == new_sha
    again, _ = evaluate(cursor_after)
    assert isinstance(again, dg.SkipReason)


def test_sensor_requests_a_run_when_the_github_head_moves(upstream):
    _, github = upstream
    first, cursor = evaluate(None)
    github.sha = "b" * 40
    moved, _ = evaluate(cursor)
    assert isinstance(moved, dg.RunRequest) and moved.run_key != first.run_key


def test_a_hub_commit_that_leaves_the_data_files_alone_is_no_reason_to_run(upstream):
    hub, _ = upstream
    _, cursor = evaluate(None)
    readme_only = hub.add_dataset_commit(IMAGES, {"image.zip": b"zip v1", "README.md": b"# images, edited"})
    result, cursor_after = evaluate(cursor)
    assert isinstance(result, dg.SkipReason)
    # The cursor follows the new commit, so the next poll compares against it.
    assert json.loads(cursor_after)["heads"][IMAGES]["revision"] == readme_only


def test_sensor_skips_naming_the_upstream_that_failed_and_keeps_its_cursor(upstream):
    _, github = upstream
    _, cursor = evaluate(None)
    github.status = 500
    result, cursor_after = evaluate(cursor)
    assert isinstance(result, dg.SkipReason)
    assert ANNOTATIONS in result.skip_message and "HTTP 500" in result.skip_message
    assert cursor_after == cursor

    github.status = 200
    recovered, _ = evaluate(cursor_after)
    assert isinstance(recovered, dg.SkipReason) and "unchanged" in recovered.skip_message


@pytest.mark.parametrize("source", ["sample", "local"])
def test_sensor_does_not_poll_upstream_for_other_sources(upstream, source):
    hub, github = upstream
    hub.clear_log()
    result, cursor = evaluate(None, source=source)
    assert isinstance(result, dg.SkipReason) and repr(source) in result.skip_message
    assert cursor is None and hub.requests == [] and github.accepts == []


def test_run_request_pins_the_new_hub_revisions(upstream, tmp_path):
    request, cursor = evaluate(None, resource=RewardhouseResource(source="hf", home=str(tmp_path), workers=2))
    heads = json.loads(cursor)["heads"]
    config = request.run_config["resources"]["rewardhouse"]["config"]
    assert config["hf_image_revision"] == heads[IMAGES]["revision"]
    assert config["hf_visualprm_revision"] == heads[VISUALPRM]["revision"]
    # A dataset without a field of its own is pinned through hf_revisions.
    pinned_apart = {u.repo for d in datasets.DATASETS for u in d.upstream if u.kind != "hf" or u.pin_setting}
    assert config["hf_revisions"] == {r: heads[r]["revision"] for r in heads if r not in pinned_apart}
    assert VLRB in config["hf_revisions"]
    # The annotation commit is the benchmark's pinned commit: a moved GitHub head is reported, not followed.
    assert "hf_annotation_commit" not in config
    # Run config replaces the resource's configured values, so they travel along.
    assert (config["source"], config["home"], config["workers"]) == ("hf", str(tmp_path), 2)


# --- the run-failure notifier ------------------------------------------------------------------------


@dg.asset
def exploding_asset():
    raise ValueError("warehouse is on fire")


@pytest.fixture
def failed_run():
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([exploding_asset], instance=instance, raise_on_error=False)
    assert not result.success
    context = dg.build_run_status_sensor_context(
        sensor_name="run_failure_notifier",
        dagster_event=result.get_run_failure_event(),
        dagster_instance=instance,
        dagster_run=result.dagster_run,
    )
    return result.dagster_run, context


def test_failed_run_is_passed_to_the_notify_hook_with_its_id_job_and_error(failed_run, monkeypatch):
    run, context = failed_run
    messages = []
    monkeypatch.setattr(sensors, "notify", messages.append)
    run_failure_notifier(context)
    (message,) = messages
    assert run.run_id in message and run.job_name in message
    assert "exploding_asset: ValueError: warehouse is on fire" in message


def test_notify_command_gets_the_message_on_stdin_without_a_shell(failed_run, monkeypatch, tmp_path):
    run, context = failed_run
    out = tmp_path / "notified.txt"
    script = "import sys, pathlib; pathlib.Path(sys.argv[1]).write_text(sys.stdin.read())"
    monkeypatch.setenv("REWARDHOUSE_NOTIFY_COMMAND", shlex.join([sys.executable, "-c", script, str(out)]))
    run_failure_notifier(context)
    assert run.run_id in out.read_text()

    # Shell syntax in the message stays text: nothing interprets it.
    monkeypatch.chdir(tmp_path)
    sensors.notify("$(touch pwned); `touch pwned`")
    assert out.read_text() == "$(touch pwned); `touch pwned`"
    assert not (tmp_path / "pwned").exists()


def test_a_broken_notify_command_does_not_break_the_sensor(failed_run, monkeypatch, tmp_path):
    _, context = failed_run
    monkeypatch.setenv("REWARDHOUSE_NOTIFY_COMMAND", str(tmp_path / "no-such-program"))
    with pytest.raises(RuntimeError, match="no-such-program"):
        sensors.notify("x")
    run_failure_notifier(context)  # logs a warning, raises nothing


def test_notify_does_nothing_without_a_command(monkeypatch):
    started = []

    class Recorder(subprocess.Popen):  # subprocess.run starts every child through Popen
        def __init__(self, args, *a, **kw):
            started.append(args)
            super().__init__(args, *a, **kw)

    monkeypatch.setattr(subprocess, "Popen", Recorder)
    monkeypatch.delenv("REWARDHOUSE_NOTIFY_COMMAND", raising=False)
    sensors.notify("run failed")
    assert started == []
    # The recorder sees a child when there is a command (so the assertion above can fail).
    monkeypatch.setenv("REWARDHOUSE_NOTIFY_COMMAND", "cat")
    sensors.notify("run failed")
    assert started == [["cat"]]
