"""A full disk under a real `rewardhouse run`: one line naming the path, the run marked failed, the
previous release current and served, and the next run publishes once there is room.

The data root lives on a small tmpfs of its own, mounted in a private mount namespace
(`unshare -rm`, which works without root) held by one process for the module: the runs enter it
with `nsenter`, the test reads it through /proc/<pid>/root, and the mount goes with the
namespace's last process, so nothing outlives the test. The previous release is a small one
published straight through `publish_release` (a sample run would cost a release judged by its
checks for nothing). The disk is filled, with one preallocated file, at two moments: before a
run, and at its publish (a pause point, tests/paused_run.py). The run after that is also the one
a SIGTERM reaches just after its publish (a whole new release costs a judged candidate, so one
run serves both).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from pipeline.runs import RESERVE_BYTES
from pipeline.unwritable import Unwritable, find, find_in_text

REPO = Path(__file__).resolve().parents[1]
CLI = Path(sys.executable).with_name("rewardhouse")
DISK_MB = 128  # the sample's data root takes about 57 MB after one run (du; image signatures are stored plain)


# ---- recognising the failure, whatever shape it comes in ---------------------------------------


def test_each_shape_of_a_full_disk_is_recognised_with_its_path():
    assert find_in_text("OSError: [Errno 28] No space left on device: '/d/staging/x.parquet'") == \
        Unwritable("No space left on device", "/d/staging/x.parquet")
    # A copy: the second path is the one written to.
    assert find_in_text("[Errno 122] Disk quota exceeded: '/src/a' -> '/d/releases/.tmp-1/a'").path == "/d/releases/.tmp-1/a"
    assert find_in_text("[Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device") == \
        Unwritable("No space left on device", None)  # pyarrow: no path
    assert find_in_text('IO Error: Could not write file "/d/.warehouse.duckdb.1a": No space left on device').path == \
        "/d/.warehouse.duckdb.1a"
    assert find_in_text("could not publish release r in /d/releases (nothing published; release q stays current): "
                        "Read-only file system (/d/releases/.tmp-r/x.parquet)").path == "/d/releases/.tmp-r/x.parquet"
    sqlite = find_in_text("(sqlite3.OperationalError) database or disk is full\n[SQL: INSERT INTO event_logs ...]")
    assert sqlite.database and sqlite.path is None and sqlite.where("/d", "/d/dagster") == "/d/dagster"
    assert find_in_text("[Errno 2] No such file or directory: '/d/x'") is None
    assert find_in_text("KeyError: 'disk'") is None
    try:
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/d/staging/a", None, "/d/staging/b")
        except OSError as exc:
            raise RuntimeError("a step failed") from exc
    except RuntimeError as exc:
        assert find(exc) == Unwritable("No space left on device", "/d/staging/b")


def test_a_streamed_copy_that_cannot_be_written_leaves_no_file_and_names_its_path(tmp_path, monkeypatch):
    """staging.write_staged_stream (the parts' signatures gathered batch by batch) on a disk that
    fills on its second batch: the OSError names the table it was writing, and neither the table
    nor its temporary file is left behind."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline import staging

    source = tmp_path / "part.parquet"
    pq.write_table(pa.table({"image_key": [f"k{i}" for i in range(100)], "thumb": [b"x" * 64] * 100}), source)
    written = []

    class FillingWriter(pq.ParquetWriter):
        def write_batch(self, batch, *args, **kwargs):
            if written:
                raise OSError(errno.ENOSPC, "Error writing bytes to file")  # as Arrow says it: no path
            written.append(batch.num_rows)
            return super().write_batch(batch, *args, **kwargs)

    monkeypatch.setattr(staging.pq, "ParquetWriter", FillingWriter)
    target = tmp_path / "out" / "image_hashes.parquet"
    with pytest.raises(OSError) as caught:
        staging.write_staged_stream(target, [str(source), str(source)], pq.read_schema(source), batch_rows=64)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(target)
    assert written == [64] and list((tmp_path / "out").iterdir()) == []


def test_a_streamed_copy_of_wide_rows_goes_in_batches_of_a_few_megabytes(tmp_path, monkeypatch):
    """write_staged_stream's default batch (staging.batch_rows_for): rows of 18 KB signatures in
    batches of about BATCH_BYTES, narrow rows in batches of 8,192; the copy holds every row, in
    order, either way."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline import staging

    wide, narrow = tmp_path / "wide.parquet", tmp_path / "narrow.parquet"
    noise = np.random.default_rng(3).integers(0, 256, (600, 18_000), dtype=np.uint8)
    pq.write_table(pa.table({"k": list(range(600)), "thumb": [r.tobytes() for r in noise]}), wide)
    pq.write_table(pa.table({"k": list(range(20_000)), "thumb": [b"ab"] * 20_000}), narrow)
    rows = staging.batch_rows_for([str(wide)])
    assert staging.BATCH_BYTES // 20_000 <= rows <= staging.BATCH_BYTES // 17_000
    assert staging.batch_rows_for([str(narrow)]) == 8192
    assert staging.batch_rows_for([str(narrow), str(wide)]) == rows  # the widest source decides
    seen = []
    real = staging.streamed
    monkeypatch.setattr(staging, "streamed", lambda path, n, columns=None: seen.append(n) or real(path, n, columns))
    out = staging.write_staged_stream(tmp_path / "out.parquet", [str(wide), str(narrow)], pq.read_schema(wide))
    assert seen == [rows, rows]
    copied = pq.read_table(out)
    assert copied["k"].to_pylist() == list(range(600)) + list(range(20_000))
    assert copied["thumb"][599].as_py() == noise[599].tobytes()


def test_gathered_parts_are_links_in_order_whole_or_absent(tmp_path, monkeypatch):
    """staging.link_staged: the parts as hard links, read back in order by parts_of; a folder left
    by a run that died before recording it is replaced; where the file system cannot link, copies;
    a failure leaves neither the folder nor its temporary one, and names the folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline import staging

    sources = []
    for k in range(3):
        sources.append(str(tmp_path / f"src{k}.parquet"))
        pq.write_table(pa.table({"k": [k * 10 + i for i in range(10)]}), sources[-1])
    out = tmp_path / "stage" / "internal" / "image_hashes"
    out.mkdir(parents=True)
    (out / "part-0000.parquet").write_bytes(b"left by a dead run")
    assert staging.link_staged(out, sources) == str(out)
    parts = staging.parts_of(out)
    assert [os.stat(p).st_ino for p in parts] == [os.stat(p).st_ino for p in sources]
    assert pa.concat_tables([pq.read_table(p) for p in parts])["k"].to_pylist() == list(range(30))
    assert staging.parts_of(sources[0]) == [sources[0]]
    os.remove(sources[0])  # the original's removal leaves the link whole
    assert pq.read_table(parts[0])["k"].to_pylist() == list(range(10))

    def no_links(*args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(staging.os, "link", no_links)
    copied = staging.link_staged(tmp_path / "copies", sources[1:])
    assert [pq.read_table(p)["k"][0].as_py() for p in staging.parts_of(copied)] == [10, 20]
    assert os.stat(staging.parts_of(copied)[0]).st_ino != os.stat(sources[1]).st_ino

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shutil, "copyfile", full)  # link_staged's fallback, with links refused still
    with pytest.raises(OSError) as caught:
        staging.link_staged(tmp_path / "failed", sources[1:])
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(tmp_path / "failed")
    assert not [p for p in tmp_path.iterdir() if "failed" in p.name]


# ---- a real run on a small disk -----------------------------------------------------------------


@dataclass
class Disk:
    holder: subprocess.Popen
    mount: Path  # as the namespace sees it

    @property
    def home(self) -> Path:
        return self.mount / "home"

    def outside(self, path: Path) -> Path:
        """`path` of the namespace, as this process reaches it."""
        return Path(f"/proc/{self.holder.pid}/root{path}")

    def command(self, *argv: str) -> list[str]:
        return ["nsenter", "-t", str(self.holder.pid), "-U", "-m", "--preserve-credentials", "--", *argv]

    def env(self) -> dict:
        return {**os.environ, "REWARDHOUSE_HOME": str(self.home), "DAGSTER_HOME": str(self.home / "dagster"),
                "PYTHONWARNINGS": "ignore"}

    def cli(self, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(str(CLI), *argv), env=self.env(), cwd=REPO, capture_output=True, text=True,
                              timeout=timeout)

    def fill(self, leave: int = 0) -> Path:
        """Take all free space but `leave` bytes with one preallocated file."""
        filler = self.outside(self.mount / "filler")
        stat = os.statvfs(filler.parent)
        size = stat.f_bavail * stat.f_frsize - leave
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)
        return filler

    def free(self) -> None:
        self.outside(self.mount / "filler").unlink(missing_ok=True)

    def _query(self, db: str, sql: str) -> list:
        """Rows of a Dagster SQLite database, read-only, from inside the namespace (SQLite resolves
        /proc/<pid>/root to this process's own root)."""
        path = self.home / "dagster" / "history" / db
        code = (f"import json, os, sqlite3; path = {str(path)!r}; "
                f"print(json.dumps(sqlite3.connect(f'file:{{path}}?mode=ro', uri=True).execute({sql!r}).fetchall() "
                "if os.path.exists(path) else []))")
        done = subprocess.run(self.command(sys.executable, "-c", code), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def runs(self) -> dict[str, str]:
        """run id -> status, from the run storage."""
        return dict(self._query("runs.db", "select run_id, status from runs"))

    def slot_holders(self) -> list[str]:
        """Runs holding a slot of a concurrency pool (the `warehouse` pool of the publish)."""
        return [r[0] for r in self._query("runs/index.db", "select run_id from concurrency_slots where run_id is not null")]

    def current(self) -> str:
        return self.outside(self.home / "releases" / "CURRENT").read_text().strip()


@pytest.fixture(scope="module")
def disk(tmp_path_factory):
    if not (shutil.which("unshare") and shutil.which("nsenter")):
        pytest.skip("needs unshare and nsenter (util-linux) for a private tmpfs")
    mount = tmp_path_factory.mktemp("small-disk")
    holder = subprocess.Popen(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size={DISK_MB}m tmpfs {mount} "
                               "&& echo mounted && read _"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if holder.stdout.readline().strip() != "mounted":
        holder.kill()
        pytest.skip(f"cannot mount a tmpfs in a private namespace here: {holder.communicate()[1].strip()}")
    yield Disk(holder, mount)
    holder.stdin.close()  # the holder exits, and the namespace and its tmpfs with it
    holder.wait(timeout=30)


PREVIOUS = "0000previous0000"


@pytest.fixture(scope="module")
def published(disk) -> str:
    """A release published before the runs: the one that must stay current and served."""
    home = disk.home
    code = ("import pyarrow as pa; from pathlib import Path; from warehouse.duck import publish_release; "
            "from warehouse.store import ReleaseStore; "
            f"publish_release(ReleaseStore(Path({str(home / 'releases')!r})), Path({str(home / 'warehouse.duckdb')!r}), "
            f"{PREVIOUS!r}, {{'notes': pa.table({{'note': ['published before the disk filled']}})}}, "
            "code_version='test', sources={}, settings={})")
    done = subprocess.run(disk.command(sys.executable, "-c", code), cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert disk.current() == PREVIOUS
    return PREVIOUS


def one_line_naming_a_path(done: subprocess.CompletedProcess, disk: Disk, under: str = "") -> str:
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    line = lines[0]
    # SQLite (the run storage) says "disk I/O error" or "database or disk is full", and no file.
    said = r"(No space left on device|Disk I/O error)( \(SQLite: [^)]*\))?"
    assert re.match(rf"rewardhouse: {said}: {re.escape(str(disk.home / under))}", line), line
    assert "Free space there" in line
    return line


def served(disk: Disk) -> str:
    """The current release as `rewardhouse sql` reports it from the warehouse."""
    sql = disk.cli("sql", "select release_id from releases where is_current", "--format", "csv")
    assert sql.returncode == 0 and "Traceback" not in sql.stderr, sql.stderr
    return sql.stdout.split()[-1]


@pytest.mark.parametrize("leave", [0, RESERVE_BYTES + 256 * 1024], ids=["full", "full-but-the-reserve"])
def test_a_full_disk_before_a_run_is_one_line_and_the_release_stays_served(disk, published, leave):
    before = disk.runs()
    disk.fill(leave)
    try:
        done = disk.cli("run")
        line = one_line_naming_a_path(done, disk)
        assert f"release {published} stays current" in line
        assert disk.current() == published
        if not leave:  # read while the disk is still full
            assert served(disk) == published
            listed = disk.cli("releases")
            assert listed.returncode == 0 and f"* {published}" in listed.stdout, listed.stderr
    finally:
        disk.free()
    # Nothing left in flight: never created, or marked failed on the way out. (Read once there is
    # room: SQLite opens a WAL database, even read-only, by creating its shared-memory file.)
    new = {rid: status for rid, status in disk.runs().items() if rid not in before}
    assert all(status == "FAILURE" for status in new.values()), new
    assert ("is marked failed" in line) == bool(new), line
    assert disk.slot_holders() == []


def paused_run(disk: Disk, where: str) -> subprocess.Popen:
    """`rewardhouse run` in the namespace, pausing `where` ("before"/"after") its publish."""
    proc = subprocess.Popen(disk.command(sys.executable, str(REPO / "tests" / "paused_run.py"), where),
                            env=disk.env(), cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            # as from a terminal: SIGINT/SIGTERM not ignored (a background job's are)
                            preexec_fn=lambda: (signal.signal(signal.SIGINT, signal.SIG_DFL),
                                                signal.signal(signal.SIGTERM, signal.SIG_DFL)))
    assert proc.stdout.readline().strip() == f"paused {where} publish", proc.communicate(timeout=60)[1][-3000:]
    return proc


def test_a_disk_that_fills_at_the_publish_keeps_the_release_served(disk, published):
    """The next run, once there is room again, is the next test's (it publishes)."""
    proc = paused_run(disk, "before")
    try:
        # Room for the release's folder (about 0.7 MB) but not for the warehouse rebuilt beside the
        # live one (about 5 MB): the publish fails halfway, wherever exactly.
        disk.fill(leave=2 << 20)
        out, err = proc.communicate("go\n", timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    try:
        line = one_line_naming_a_path(done, disk)
        assert "(in warehouse_release)" in line and f"release {published} stays current" in line
        assert served(disk) == published == disk.current()
    finally:
        disk.free()
    run_id = line.split("; run ")[1].split()[0]
    assert disk.runs()[run_id] == "FAILURE"  # not left STARTED
    assert disk.slot_holders() == []  # nor holding the `warehouse` pool slot of its publish
    print(line)


def test_the_next_run_publishes_and_a_stop_just_after_its_publish_exits_143(disk, published):
    """Once there is room, the next run publishes (here it finishes the publish the previous test's
    full disk cut short; run alone, it does a whole run). SIGTERM lands just after the publish,
    past the run's last safe point: the run finishes, and the command still exits 128 + 15 and
    says that the release was published and that it stopped."""
    before = disk.current()
    proc = paused_run(disk, "after")
    try:
        now = disk.current()
        assert now != before
        os.kill(proc.pid, signal.SIGTERM)
        said = [proc.stderr.readline()]
        while "SIGTERM received" not in said[-1]:  # the stop is on record before the run goes on
            assert said[-1], said
            said.append(proc.stderr.readline())
        out, err = proc.communicate("go\n", timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(said) + err
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("rewardhouse: stopped by SIGTERM: run ") and "finished" in last, last
    assert last.endswith(f"release {now} was published and is current"), last
    # "published", not "unchanged": CURRENT moved, even onto a folder the cut-short publish left whole.
    assert out.startswith(f"release {now}: published")
    assert served(disk) == now == disk.current()
    run_id = last.split("run ")[1].split()[0]
    assert disk.runs()[run_id] == "SUCCESS" and disk.slot_holders() == []
