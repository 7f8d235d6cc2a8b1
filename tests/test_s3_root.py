"""A data root in a bucket, end to end: whole `rewardhouse run` processes with
REWARDHOUSE_HOME=s3://…, against moto's standalone S3 server on 127.0.0.1 behind a loopback proxy
that holds chosen requests. Kills and races are driven by the requests the publishers make (a
held PUT), not by timing. Readers are second processes with nothing but the URL and credentials."""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import run_control
from tests.s3_server import SECRET, Proxy, aws_env, free_port, make_bucket, start_moto
from warehouse.objectstore import ObjectReleaseStore, Root

CLI = Path(sys.executable).with_name("rewardhouse")
MANIFEST_PUT = r"/releases/[0-9a-f]{16}/manifest\.json$"
CURRENT_PUT = r"/releases/CURRENT$"
# The first request of a publish: the probe of the store's conditional writes, before CURRENT is read.
PROBE_PUT = r"/\.rewardhouse/probe-"


@pytest.fixture(scope="module")
def s3():
    proc, url = start_moto()
    proxy = Proxy(url)
    yield url, proxy
    proxy.close()
    proc.terminate()
    proc.wait(10)


def env_for(url: str, endpoint: str, scratch: Path) -> dict:
    """Only the data root's URL, the AWS settings and a scratch folder: no path of another machine."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "REWARDHOUSE_", "DAGSTER_"))}
    return {**keep, **aws_env(endpoint), "REWARDHOUSE_HOME": url, "REWARDHOUSE_SCRATCH": str(scratch),
            "PYTHONWARNINGS": "ignore"}


def start(url: str, endpoint: str, scratch: Path, *argv: str) -> subprocess.Popen:
    return subprocess.Popen([str(CLI), "run", *argv], env=env_for(url, endpoint, scratch), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def cli(url: str, endpoint: str, scratch: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *argv], env=env_for(url, endpoint, scratch), capture_output=True, text=True,
                          timeout=180)


def sql(url: str, endpoint: str, scratch: Path, query: str) -> list[list[str]]:
    done = cli(url, endpoint, scratch, "sql", "--format", "csv", query)
    assert done.returncode == 0, done.stderr
    return [line.split(",") for line in done.stdout.strip().splitlines()[1:]]


def store(url: str, endpoint: str, monkeypatch) -> ObjectReleaseStore:
    for key, value in aws_env(endpoint).items():
        monkeypatch.setenv(key, value)
    return ObjectReleaseStore(Root.parse(url))


def test_an_s3_root_runs_end_to_end_and_a_second_machine_reads_it(s3, tmp_path, monkeypatch):
    endpoint, proxy = s3
    url = f"s3://{make_bucket(endpoint, 'e2e-root')}/team"
    run = start(url, proxy.url, tmp_path / "builder")
    code, out, err = run_control.finish(run, 300)
    assert code == 0, err
    assert "published" in out and any(line.strip().startswith(f"REWARDHOUSE_HOME={url} ") and "rewardhouse sql " in line
                                      for line in out.splitlines())

    bucket = store(url, endpoint, monkeypatch)
    rid = bucket.current()
    keys = bucket._keys("team")
    assert {f"team/releases/{rid}/{name}" for name in ("manifest.json", "release.duckdb", "prm_steps.parquet",
                                                         "exports/visualprm_train.jsonl")} <= set(keys)
    assert any(k.startswith("team/staging/") for k in keys) and any(k.startswith("team/quality/") for k in keys)
    manifest = bucket.manifest(rid)
    assert manifest["tables"]["prm_steps"]["rows"] == 1478 and manifest["database"]["file"] == "release.duckdb"
    meta = json.loads(bucket._get(f"team/releases/{rid}/exports/visualprm_train_meta.json")[0])
    assert meta["visualprm_train"]["root"] == f"{url}/releases/{rid}/exports"
    # The review page goes with the release, its thumbnails beside it, and the run names its URL.
    page = bucket._get(f"team/releases/{rid}/review/index.html")[0].decode()
    thumbs = [k for k in keys if k.startswith(f"team/releases/{rid}/review/thumbs/")]
    linked = set(re.findall(r"thumbs/[0-9a-f]{2}/([0-9a-f]{64})\.jpg", page))
    assert len(thumbs) >= 22 and {k.rsplit("/", 1)[1][:-4] for k in thumbs} == linked  # every one the page shows, no other
    assert f"review the dedupe and contamination decisions: {url}/releases/{rid}/review/index.html" in out
    # Credentials are passed to the client and nowhere else: not in the output, not in any file.
    assert SECRET not in out + err
    assert not [p for p in (tmp_path / "builder").rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]

    # A second machine: a fresh scratch folder, the URL and the credentials, straight to the server.
    reader = tmp_path / "reader"
    assert sql(url, endpoint, reader, "select count(*), count(*) filter (where label = '-') from prm_steps") == [["1478", "148"]]
    assert sql(url, endpoint, reader, "select task, count(*) from mmrb2_pairs group by task order by task") == [
        ["edit", "8"], ["interleaved", "6"], ["reasoning", "7"], ["t2i", "8"]]
    assert sql(url, endpoint, reader, "select current_release from _rewardhouse") == [[rid]]
    assert sql(url, endpoint, reader, "select release_id, is_current from releases") == [[rid, "True"]]
    listing = cli(url, endpoint, reader, "releases")
    assert listing.returncode == 0 and listing.stdout.startswith(f"* {rid}") and "mmrb2: 29 pairs" in listing.stdout
    refused = cli(url, endpoint, reader, "sql", "create table x as select 1")
    assert refused.returncode == 2 and "read-only" in refused.stderr
    review = cli(url, endpoint, reader, "review")
    assert review.returncode == 0 and review.stdout.splitlines()[0] == f"{url}/releases/{rid}/review/index.html"
    assert bucket._keys("team") == keys  # the reader wrote nothing

    # A reader that starts mid-publish: between its first request (CURRENT) and the next, another
    # release is published. It reads the release CURRENT named when it read it.
    hold = proxy.hold("GET", CURRENT_PUT)
    try:
        late = subprocess.Popen([str(CLI), "sql", "--format", "csv", "select release_id from releases where is_current"],
                                env=env_for(url, proxy.url, reader), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert hold.arrived.wait(120)
        other = tmp_path / "other" / "release.duckdb"
        bucket.download(f"releases/{rid}/release.duckdb", other)
        bucket.publish("0" * 16, {"release.duckdb": other}, {**manifest, "created_at": "2999-01-01T00:00:00+00:00"})
    finally:
        hold.release()
        proxy.holds.remove(hold)
    out, err = late.communicate(timeout=120)
    assert late.returncode == 0 and out.split() == ["release_id", "0" * 16], err


@pytest.mark.timeout(600)
def test_a_publish_killed_mid_publish_leaves_the_previous_release_whole_and_is_swept(s3, tmp_path, monkeypatch):
    endpoint, proxy = s3
    url = f"s3://{make_bucket(endpoint, 'killed-root')}/team"
    builder, reader = tmp_path / "builder", tmp_path / "reader"
    code, _, err = run_control.finish(start(url, proxy.url, builder), 300)
    assert code == 0, err
    bucket = store(url, endpoint, monkeypatch)
    first = bucket.current()
    negatives = sql(url, endpoint, reader, "select count(*) filter (where label = '-') from prm_steps")

    # Killed after the new release's objects, before its manifest.
    hold = proxy.hold("PUT", MANIFEST_PUT)
    run = start(url, proxy.url, builder, "--set", "prm_label_threshold=0.5")
    assert hold.arrived.wait(300), run_control.finish(run, 5)
    assert sql(url, endpoint, reader, "select current_release from _rewardhouse") == [[first]]  # a reader meanwhile
    run_control.kill_group(run)
    hold.release(forward=False)
    run_control.finish(run, 60)
    proxy.holds.remove(hold)
    leftovers = [k for k in bucket._keys("team/releases") if not k.split("/")[2] in (first, "CURRENT")]
    assert leftovers and not any(k.endswith("manifest.json") for k in leftovers)
    assert bucket.current() == first and bucket.releases() == [first]
    assert sql(url, endpoint, reader, "select count(*) filter (where label = '-') from prm_steps") == negatives
    swept = cli(url, endpoint, reader, "gc", "--leftover-minutes", "0")
    assert swept.returncode == 0 and "removed 1 leftover(s) of killed publishes" in swept.stdout, swept.stdout + swept.stderr
    assert bucket._keys("team/releases") == sorted(k for k in bucket._keys("team/releases") if k.split("/")[2] in (first, "CURRENT"))

    # Killed after its manifest, before CURRENT moved: the new release is whole but not current.
    hold = proxy.hold("PUT", CURRENT_PUT)
    run = start(url, proxy.url, builder, "--set", "prm_label_threshold=0.5")
    assert hold.arrived.wait(300), run_control.finish(run, 5)
    second = next(r for r in bucket.releases() if r != first)
    assert sql(url, endpoint, reader, "select current_release from _rewardhouse") == [[first]]
    run_control.kill_group(run, signal.SIGKILL)
    hold.release(forward=False)
    run_control.finish(run, 60)
    proxy.holds.remove(hold)
    assert bucket.current() == first and sorted(bucket.releases()) == sorted([first, second])

    # The next run finishes the job, through an endpoint that fails it twice: the answer to its
    # swap of CURRENT is lost, and the copy of its staged work after the swap is refused. CURRENT
    # names its release, so it is published, with one warning.
    faults = [proxy.fault("PUT", CURRENT_PUT),
              proxy.fault("PUT", r"/team/(staging|quality)/", status=403, code="AccessDenied", times=None)]
    try:
        code, out, err = run_control.finish(start(url, proxy.url, builder, "--set", "prm_label_threshold=0.5"), 300)
    finally:
        proxy.faults[:] = [f for f in proxy.faults if f not in faults]
    assert code == 0, err
    assert bucket.current() == second and f"release {second}: published" in out
    warnings = [line for line in err.splitlines() if line.startswith("rewardhouse: warning:")]
    assert faults[0].hits >= 1 and len(warnings) == 1, err
    assert warnings[0].startswith(f"rewardhouse: warning: release {second} is current in {url}, but the staged work "
                                  "and quality results were not copied there")
    assert sql(url, endpoint, reader, "select current_release from _rewardhouse") == [[second]]
    assert sql(url, endpoint, reader, "select count(*) filter (where label = '-') from prm_steps") != negatives


@pytest.mark.timeout(600)
def test_two_runs_from_the_same_current_the_one_that_publishes_second_fails_in_one_line(s3, tmp_path, monkeypatch):
    endpoint, proxy = s3
    url = f"s3://{make_bucket(endpoint, 'race-root')}/team"
    # Each run has its own way to the bucket, held at its first publish request: both have built
    # and judged their release on the bucket as they read it (empty) when they started.
    second_way = Proxy(endpoint)
    try:
        holds = [proxy.hold("PUT", PROBE_PUT), second_way.hold("PUT", PROBE_PUT)]
        runs = [start(url, way.url, tmp_path / f"builder{i}", "--set", f"prm_label_threshold={t}")
                for i, (way, t) in enumerate(((proxy, 0.3), (second_way, 0.6)))]
        try:
            assert all(hold.arrived.wait(400) for hold in holds), [run_control.finish(run, 5) for run in runs]
            holds[0].release()
            first = run_control.finish(runs[0], 300)  # publishes completely
        finally:
            for hold in holds:
                hold.release()
        second = run_control.finish(runs[1], 300)  # only then starts its publish
    finally:
        proxy.holds[:] = [h for h in proxy.holds if h not in holds]
        second_way.close()
    bucket = store(url, endpoint, monkeypatch)
    winner = bucket.current()
    assert first[0] == 0 and f"release {winner}: published" in first[1], first[2][-2000:]
    code, _, err = second
    assert code == 1, err[-2000:]
    lines = [line for line in err.splitlines() if "not published:" in line]
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
    assert lines[0].endswith(f"not published: {url} moved to {winner} since this run read no release; "
                             "run again on the new current")
    assert bucket.releases() == [winner]  # the second release was refused before anything of it was uploaded


def test_readers_of_an_unreachable_endpoint_or_a_missing_bucket_get_one_line(s3, tmp_path):
    endpoint, _ = s3
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    cases = {(url, where, argv): subprocess.Popen([str(CLI), *argv], env=env_for(url, where, tmp_path / "reader"),
                                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for url, where in (("s3://any-bucket/team", closed), ("s3://no-such-bucket/team", endpoint))
             for argv in (("releases",), ("sql", "select 1"))}
    for (url, where, argv), proc in cases.items():
        out, err = proc.communicate(timeout=120)
        bucket = url.split("/")[2]
        why = ("the endpoint does not answer; check AWS_ENDPOINT_URL" if where == closed else
               f"the bucket {bucket} does not exist there; check the bucket in {url}, AWS_ENDPOINT_URL")
        assert proc.returncode == 1 and out == "", (argv, err)
        assert len(err.splitlines()) == 1, (argv, err)
        assert err.startswith(f"rewardhouse: cannot read {url} (endpoint {where}, bucket {bucket}): {why}"), (argv, err)
