"""Least privilege: the warehouse readers cannot write, the UI listens on loopback only, and
HF_TOKEN goes to the Hub and nowhere else (no log, metadata, manifest, lock file or table)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
import zlib
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import serve_hub_datasets
from hf_server import FakeHub

from pipeline.cli import EXAMPLE_SQL, main
from pipeline.datasets import table_contracts
from pipeline.settings import MMRB2_ANNOTATION_COMMIT, MMRB2_ANNOTATION_REPO, MMRB2_IMAGE_REPO, VISUALPRM_REPO
from pipeline.sources.base import ChecksumCache, SourceError
from pipeline.mmrb2.sample import write_sample
from pipeline.mmrb2.source import fetch_mmrb2_hf
from pipeline.visualprm.sample import PARQUET_RELPATH, write_visualprm_sample
from warehouse.duck import connect_readonly

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SECRET = "hf_LeakCanary7Qx9Zt3WvB2nK8sR"


# --- HF_TOKEN -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def token_run(tmp_path_factory):
    """`rewardhouse run --source hf -v` in a subprocess, against a loopback Hub that answers only
    requests carrying HF_TOKEN, with huggingface_hub logging at debug. Yields (workdir, hub, output)."""
    work = tmp_path_factory.mktemp("token_run")
    upstream = work / "upstream"
    write_sample(upstream)
    write_visualprm_sample(upstream)
    with FakeHub(token=SECRET) as hub:
        hub.add_dataset_commit(MMRB2_IMAGE_REPO, {"image.zip": (upstream / MMRB2_IMAGE_REPO / "image.zip").read_bytes()})
        bench = upstream / MMRB2_ANNOTATION_REPO / "benchmark"
        hub.add_raw_files(MMRB2_ANNOTATION_REPO, MMRB2_ANNOTATION_COMMIT,
                          {f"benchmark/{p.name}": p.read_bytes() for p in bench.glob("*.json")})
        shard = PARQUET_RELPATH[len(VISUALPRM_REPO) + 1:]
        hub.add_dataset_commit(VISUALPRM_REPO, {shard: (upstream / PARQUET_RELPATH).read_bytes()})
        serve_hub_datasets(hub, upstream)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "REWARDHOUSE_", "HF_", "HUGGING"))}
        env.update(
            HF_TOKEN=SECRET, HF_ENDPOINT=hub.url, HF_HOME=str(work / "hf_home"), HF_HUB_DISABLE_XET="1",
            HF_HUB_VERBOSITY="debug", REWARDHOUSE_HOME=str(work / "home"), DAGSTER_HOME=str(work / "home" / "dagster"),
            REWARDHOUSE_GITHUB_RAW=hub.url, NO_PROXY="127.0.0.1,localhost", PYTHONUNBUFFERED="1",
        )
        done = subprocess.run([str(BIN / "rewardhouse"), "run", "--source", "hf", "-v"], cwd=REPO, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
        output = done.stdout + done.stderr
        assert done.returncode == 0, output.decode(errors="replace")[-4000:]
        yield work, hub, output


def _decoded(path: Path, raw: bytes) -> list[bytes]:
    """What a byte grep cannot see: cells of SQLite (zlib-compressed Dagster snapshots included),
    DuckDB and Parquet files, and zlib streams."""
    def inflate(value) -> list[bytes]:
        data = value.encode() if isinstance(value, str) else value
        if not isinstance(data, bytes):
            return [repr(value).encode()]
        with contextlib.suppress(zlib.error):
            return [data, zlib.decompress(data)]
        return [data]

    if raw.startswith(b"SQLite format 3\0"):
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = [r[0] for r in con.execute("select name from sqlite_master where type = 'table'")]
            return [b for t in tables for row in con.execute(f'select * from "{t}"') for cell in row for b in inflate(cell)]
        finally:
            con.close()
    if raw[8:12] == b"DUCK":
        with duckdb.connect(str(path), read_only=True) as con:
            tables = con.execute("select table_schema, table_name from information_schema.tables").fetchall()
            return [repr(con.execute(f'select * from "{s}"."{t}"').fetchall()).encode() for s, t in tables]
    if raw.startswith(b"PAR1"):
        return [repr(pq.read_table(path).to_pylist()).encode()]
    return inflate(raw)[1:]


def secret_hits(root: Path, secret: str) -> list[str]:
    needle = secret.encode()
    hits = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        raw = path.read_bytes()
        if needle in raw or any(needle in blob for blob in _decoded(path, raw)):
            hits.append(str(path.relative_to(root)))
    return hits


def test_the_secret_scan_sees_inside_compressed_stores(tmp_path):
    con = sqlite3.connect(tmp_path / "runs.db")
    con.execute("create table snapshots (body blob)")
    con.execute("insert into snapshots values (?)", [zlib.compress(f'{{"token": "{SECRET}"}}'.encode())])
    con.commit()
    con.close()
    pq.write_table(pa.table({"x": [SECRET] * 100}), tmp_path / "t.parquet", compression="zstd")
    with duckdb.connect(str(tmp_path / "w.duckdb")) as db:
        db.execute("create schema s; create table s.t as select ? || range::varchar as v from range(5000)", [SECRET])
    (tmp_path / "clean.txt").write_text("nothing here")

    assert SECRET.encode() not in (tmp_path / "runs.db").read_bytes()  # only decoding finds it there
    assert secret_hits(tmp_path, SECRET) == ["runs.db", "t.parquet", "w.duckdb"]


def test_hf_token_reaches_the_hub_and_is_written_nowhere(token_run):
    work, hub, output = token_run
    dataset_calls = [r for r in hub.requests if r.path.startswith(("/api/datasets/", "/datasets/"))]
    raw_calls = [r for r in hub.requests if r.path.startswith(f"/{MMRB2_ANNOTATION_REPO}/")]
    assert dataset_calls and all(r.authorization == f"Bearer {SECRET}" and r.status == 200 for r in dataset_calls)
    assert raw_calls and all(r.authorization is None for r in raw_calls)  # not sent to the GitHub host
    assert b"hf: fetching" in output  # the verbose log was captured

    assert SECRET.encode() not in output
    home = work / "home"
    assert (home / "raw" / "hf" / "sources.lock.json").is_file() and (home / "warehouse.duckdb").is_file()
    assert list((home / "releases").glob("*/manifest.json")) and list((home / "staging").rglob("_result.json"))
    assert list((home / "dagster").rglob("*.db"))
    assert secret_hits(work, SECRET) == []


def test_hf_token_is_not_sent_to_the_cdn_a_hub_file_redirects_to(hub, tmp_path):
    hub.token = SECRET
    write_sample(tmp_path / "upstream")
    zip_bytes = (tmp_path / "upstream" / MMRB2_IMAGE_REPO / "image.zip").read_bytes()
    hub.add_dataset_commit(MMRB2_IMAGE_REPO, {"image.zip": zip_bytes})
    bench = tmp_path / "upstream" / MMRB2_ANNOTATION_REPO / "benchmark"
    hub.add_raw_files(MMRB2_ANNOTATION_REPO, MMRB2_ANNOTATION_COMMIT,
                      {f"benchmark/{p.name}": p.read_bytes() for p in bench.glob("*.json")})
    with FakeHub() as cdn:
        hub.serve_lfs_from(cdn)

        snap = fetch_mmrb2_hf(tmp_path / "raw", ChecksumCache(tmp_path / "c.json"), hf_endpoint=hub.url,
                        github_raw_base=hub.url, token=SECRET)

        assert snap.image_zip.read_bytes() == zip_bytes
        assert [r.status for r in hub.requests if r.path.endswith("/image.zip")] == [302]
        assert [r.authorization for r in hub.requests if r.path.endswith("/image.zip")] == [f"Bearer {SECRET}"]
        assert [(r.status, r.authorization) for r in cdn.body_gets()] == [(200, None)]


def test_a_rejected_token_is_not_echoed_in_the_error(hub, tmp_path):
    hub.token = SECRET
    hub.add_dataset_commit(MMRB2_IMAGE_REPO, {"image.zip": b"PK\x05\x06" + bytes(18)})
    wrong = "hf_WrongCanary4Jd8Lm2Pq6Rs"
    messages: list[str] = []

    with pytest.raises(SourceError) as err:
        fetch_mmrb2_hf(tmp_path / "raw", ChecksumCache(tmp_path / "c.json"), hf_endpoint=hub.url, github_raw_base=hub.url,
                 token=wrong, log=messages.append)

    assert "HF_TOKEN" in str(err.value)
    assert wrong not in str(err.value) and not any(wrong in m for m in messages)
    assert secret_hits(tmp_path, wrong) == []


# --- the warehouse readers --------------------------------------------------------------------------


@pytest.fixture
def warehouse_home(token_run, monkeypatch) -> Path:
    home = token_run[0] / "home"
    monkeypatch.setenv("REWARDHOUSE_HOME", str(home))
    return home


def _sql(capsys, query: str, *extra: str) -> tuple[int, str, str]:
    code = main(["sql", query, *extra])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "statement",
    [
        "create table main.evil as select 1",
        "insert into releases (release_id) values ('forged')",
        "drop view mmrb2_pairs",
        "select 1; drop view mmrb2_pairs",
        "attach '{dir}/other.duckdb' as other",
        "copy (select 1) to '{dir}/x.csv'",
        "copy mmrb2_pairs to '{dir}/pairs.parquet' (format parquet)",
        "export database '{dir}/dump'",
        "install httpfs",
        "load httpfs",
        "set enable_external_access = true",
        "select * from read_csv('/etc/hostname')",
    ],
)
def test_sql_refuses_writes_in_one_clear_line_and_writes_nothing(warehouse_home, tmp_path, capsys, statement):
    before = (warehouse_home / "warehouse.duckdb").read_bytes()

    code, out, err = _sql(capsys, statement.format(dir=tmp_path))

    assert code != 0 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("rewardhouse: refused: "), err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
    assert (warehouse_home / "warehouse.duckdb").read_bytes() == before


def test_sql_copy_to_a_file_creates_no_file(warehouse_home, tmp_path, capsys):
    target = tmp_path / "x.csv"
    code, _, err = _sql(capsys, f"COPY (SELECT 1) TO '{target}'")
    assert code != 0 and "COPY" in err
    assert not target.exists()


PAIRS_COLUMNS = [("pair_id", "VARCHAR"), ("task", "VARCHAR"), ("prompt_source", "VARCHAR"), ("prompt_metadata", "VARCHAR"),
                 ("model_a", "VARCHAR"), ("model_b", "VARCHAR"), ("chosen", "VARCHAR"), ("human_annotations", "VARCHAR"),
                 ("n_images_a", "INTEGER"), ("n_images_b", "INTEGER"), ("n_texts_a", "INTEGER"), ("n_texts_b", "INTEGER"),
                 ("has_prompt_content", "BOOLEAN")]


def _rows(out: str) -> list[list[str]]:
    return [line.split(",") for line in out.strip().splitlines()[1:]]


# Each query with what the embedded sample's release must answer (values of the sample's data).
QUERIES = [
    (EXAMPLE_SQL, lambda rows: rows == [["edit", "8", "50.0"], ["interleaved", "6", "66.7"], ["reasoning", "7", "42.9"],
                                        ["t2i", "8", "62.5"]]),
    ("select source, round(avg(label='+'), 4) from prm_steps join prm_samples using (sample_id) group by 1 order by 1",
     lambda rows: rows[:3] == [["CLEVR_math", "0.9251"], ["MathV360K", "0.9467"], ["ai2d", "0.9306"]] and len(rows) == 9),
    ("select scope, source, samples, steps from prm_label_stats where scope = 'overall'",
     lambda rows: rows == [["overall", "(all)", "236", "1478"]]),
    ("select count(*), count(sources->'mmrb2'->'revisions'), bool_and(is_current) from releases",
     lambda rows: rows == [["1", "1", "True"]]),
    ("select * from mmrb2_task_summary",
     lambda rows: rows == [["edit", "8", "50.0", "17", "0", "1"], ["interleaved", "6", "66.7", "26", "0", "0"],
                           ["reasoning", "7", "42.9", "14", "1", "1"], ["t2i", "8", "62.5", "16", "0", "0"]]),
    ("with t as (select task from mmrb2_pairs) from t select count(*)", lambda rows: rows == [["29"]]),
    # every table with a contract (the registry's datasets and the shared ones), the gate's results,
    # the MMRB2 summary view and the warehouse's own
    ("show tables", lambda rows: [r[0] for r in rows] == sorted(
        {*table_contracts(), "_rewardhouse", "mmrb2_task_summary", "quality_results", "releases"})),
    ("describe mmrb2_pairs", lambda rows: [(r[0], r[1]) for r in rows] == PAIRS_COLUMNS),
    ("summarize mmrb2_pairs", lambda rows: [r[0] for r in rows] == [c for c, _ in PAIRS_COLUMNS]),
    ("explain select * from mmrb2_pairs", lambda rows: rows[0][0] == "physical_plan" and "Seq Scan" in rows[0][1]),
    ("pragma database_size", lambda rows: len(rows) == 1 and rows[0][0] == "warehouse"),
]


@pytest.mark.parametrize("query, expected", QUERIES, ids=[q[:40] for q, _ in QUERIES])
def test_sql_still_answers_queries(warehouse_home, capsys, query, expected):
    code, out, err = _sql(capsys, query, "--format", "csv")
    assert code == 0, err
    assert expected(_rows(out)), out


def test_consumer_connection_refuses_catalog_writes(warehouse_home):
    with connect_readonly(warehouse_home / "warehouse.duckdb") as con:
        for statement in ("create table main.evil as select 1", "insert into releases (release_id) values ('x')",
                          "drop view mmrb2_pairs"):
            with pytest.raises(duckdb.Error, match="read-only"):
                con.execute(statement)


def test_consumer_connection_cannot_write_files(warehouse_home, tmp_path):
    with connect_readonly(warehouse_home / "warehouse.duckdb") as con:
        with contextlib.suppress(duckdb.Error):
            con.execute(f"copy (select 1) to '{tmp_path / 'x.csv'}'")
    assert not (tmp_path / "x.csv").exists()


# --- the Dagster UI (`make dev`) -----------------------------------------------------------------


def _stand_in_uv(folder: Path) -> Path:
    """`uv` for the Makefile: `uv run --frozen CMD ...` runs CMD from PATH, anything else (the
    bootstrap's --version and sync) does nothing, so `make dev` runs its recipe on this venv."""
    folder.mkdir(parents=True, exist_ok=True)
    uv = folder / "uv"
    uv.write_text('#!/bin/sh\nif [ "$1" = run ]; then shift 2; exec "$@"; fi\n')
    uv.chmod(0o755)
    return uv


def _make_env(tmp_path: Path, path_first: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "REWARDHOUSE_", "MAKE"))}
    env.update(PATH=f"{path_first}{os.pathsep}{BIN}{os.pathsep}{env.get('PATH', '')}",
               DAGSTER_HOME=str(tmp_path / "dagster"), REWARDHOUSE_HOME=str(tmp_path / "data"),
               NO_PROXY="127.0.0.1,localhost", **extra)
    return env


def test_make_dev_passes_the_configured_host_and_port(tmp_path):
    shims = tmp_path / "shims"
    uv = _stand_in_uv(shims)
    argv_file = tmp_path / "argv"
    (shims / "dg").write_text(f'#!/bin/sh\necho "$@" > {argv_file}\n')  # make dev runs Dagster's dg dev
    (shims / "dg").chmod(0o755)

    for extra, expected in (({}, "dev --host 127.0.0.1 --port 3000"),
                            ({"REWARDHOUSE_UI_HOST": "0.0.0.0", "REWARDHOUSE_UI_PORT": "3999"},
                             "dev --host 0.0.0.0 --port 3999")):
        subprocess.run(["make", "-s", "dev", f"UV={uv}"], cwd=REPO, env=_make_env(tmp_path, shims, **extra),
                       check=True, capture_output=True, timeout=60)
        assert argv_file.read_text().split() == expected.split()


def _listening(pids: set[int]) -> list[tuple[str, int]]:
    """TCP sockets in LISTEN state held by `pids`, as (address, port), from /proc."""
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:["):
                        inodes.add(link[8:-1])
    found = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        with contextlib.suppress(OSError), open(table) as fh:
            for line in fh.readlines()[1:]:
                fields = line.split()
                if fields[3] != "0A" or fields[9] not in inodes:
                    continue
                hex_addr, hex_port = fields[1].split(":")
                packed = b"".join(bytes.fromhex(hex_addr[i : i + 8])[::-1] for i in range(0, len(hex_addr), 8))
                found.append((socket.inet_ntop(family, packed), int(hex_port, 16)))
    return found


def _session(leader: int) -> set[int]:
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.getsid(int(entry)) == leader:
                    pids.add(int(entry))
    return pids


def _outside_address() -> str | None:
    """An address of this machine other than loopback, if it has one."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.254.254.254", 9))
        address = s.getsockname()[0]
        return None if ipaddress.ip_address(address).is_loopback else address
    return None


def test_make_dev_serves_the_ui_on_loopback_only(tmp_path):
    from ui_server import free_port

    uv = _stand_in_uv(tmp_path / "shims")
    port = free_port()
    env = _make_env(tmp_path, uv.parent, REWARDHOUSE_UI_PORT=str(port))
    (tmp_path / "dagster").mkdir()
    (tmp_path / "dagster" / "dagster.yaml").write_bytes((REPO / "dagster.yaml").read_bytes())
    # Storage created once up front: the webserver and the daemon would race to create it.
    subprocess.run([str(BIN / "dagster"), "instance", "migrate"], cwd=REPO, env=env, check=True,
                   capture_output=True, timeout=120)
    log = tmp_path / "make-dev.log"
    with open(log, "wb") as out:
        make = subprocess.Popen(["make", "-s", "dev", f"UV={uv}"], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert make.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            with contextlib.suppress(OSError):
                opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
                if opener.open(f"http://127.0.0.1:{port}/server_info", timeout=2).status == 200:
                    break
            time.sleep(0.25)

        listeners = _listening(_session(make.pid))
        assert ("127.0.0.1", port) in listeners
        assert all(ipaddress.ip_address(address).is_loopback for address, _ in listeners), listeners
        if (outside := _outside_address()) is not None:
            with pytest.raises(OSError), socket.create_connection((outside, port), timeout=2):
                pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(make.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            make.wait(timeout=1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(make.pid, signal.SIGKILL)
        make.wait(timeout=10)
