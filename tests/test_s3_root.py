"""A data root in a bucket, end to end: whole `rewardhouse run` processes with
REWARDHOUSE_HOME=s3://…, against moto's standalone S3 server on 127.0.0.1 behind a loopback proxy
that holds chosen requests. Kills and races are driven by the requests the publishers make (a
held PUT), not by timing. Readers are second processes with nothing but the URL and credentials."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import run_control
from tests.s3_server import SECRET, Proxy, aws_env, make_bucket, start_moto
from warehouse.objectstore import ObjectReleaseStore, Root

CLI = Path(sys.executable).with_name("rewardhouse")
MANIFEST_PUT = r"/releases/[0-9a-f]{16}/manifest\.json$"
CURRENT_PUT = r"/releases/CURRENT$"


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
    assert "published" in out and f"REWARDHOUSE_HOME={url} rewardhouse sql" in out

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
    assert len(thumbs) == 22 and all(k.rsplit("/", 1)[1][:-4] in page for k in thumbs)
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

    # The next run finishes the job.
    code, out, err = run_control.finish(start(url, proxy.url, builder, "--set", "prm_label_threshold=0.5"), 300)
    assert code == 0, err
    assert bucket.current() == second
    assert sql(url, endpoint, reader, "select current_release from _rewardhouse") == [[second]]
    assert sql(url, endpoint, reader, "select count(*) filter (where label = '-') from prm_steps") != negatives


@pytest.mark.timeout(600)
def test_two_runs_racing_to_publish_exactly_one_wins_the_other_says_so_in_one_line(s3, tmp_path, monkeypatch):
    endpoint, proxy = s3
    url = f"s3://{make_bucket(endpoint, 'race-root')}/team"
    hold = proxy.hold("PUT", CURRENT_PUT, count=2)  # both have read CURRENT and are about to swap it
    runs = [start(url, proxy.url, tmp_path / f"builder{i}", "--set", f"prm_label_threshold={t}")
            for i, t in enumerate((0.3, 0.6))]
    try:
        assert hold.arrived.wait(400)
    finally:
        hold.release(forward=True)
    results = [run_control.finish(run, 300) for run in runs]
    proxy.holds.remove(hold)
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 1], [r[2][-2000:] for r in results]
    loser = next(err for code, _, err in results if code == 1)
    lines = [line for line in loser.splitlines() if "not made current" in line]
    assert len(lines) == 1 and "run again on the new current" in lines[0] and "Traceback" not in loser
    bucket = store(url, endpoint, monkeypatch)
    winner = next(out for code, out, _ in results if code == 0)
    assert f"release {bucket.current()}: published" in winner
    assert len(bucket.releases()) == 2  # the loser's release is whole, just not current
