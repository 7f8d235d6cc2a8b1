"""Publish one release through `publish_release`, as the `warehouse_release` asset does, in a
process of its own so a test can kill it, starve it of disk or run several at once.

    python tests/publish_helper.py ROOT SEQ [--keep K] [--go] [--fsize BYTES] [--pause-at N]
    python tests/publish_helper.py ROOT 0 --rollback RELEASE | --prune --keep K | --tag NAME=REF [--pause-at N]

`stage(root, seq)` first writes what the release is made of: Parquet tables under ROOT/staging/SEQ
(published by copy, as the asset publishes its candidate), an export file to copy and a folder of
content-addressed blobs to hard-link. SEQ names the release and sets its row counts, so every
release's counts differ. With --go the helper prints "ready" once imported and starts on a line on
stdin, so a kill can be timed against the publish alone. --fsize caps the size of any file the
process writes (RLIMIT_FSIZE with SIGXFSZ ignored: the write fails with EFBIG, as on a full disk).
Prints what it did as JSON (release id, published, pruned, row counts, timings, and the events it
went through); a PublishError exits 3 with its one-line message on stderr. With --rollback,
--prune or --tag it runs `warehouse.lifecycle`'s rollback, prune or tag on ROOT instead, with the same events.

Events, so a kill test aims at a moment of the publish rather than at a time: every file-system
step that makes a publish durable or visible (os.fsync, os.replace, os.rename, os.link,
shutil.copyfile / copy2) and every DuckDB statement is an event, numbered from 1 in the order the
publish makes them. With --pause-at N (or NAME#K, the K-th event of that name; several,
comma-separated) the helper prints `event N <name>` just before that event and waits there for a
line on stdin, so a test can look at the data root at that moment, or kill it.
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from warehouse.duck import publish_release  # noqa: E402
from warehouse.store import Manifest, PublishError, ReleaseStore  # noqa: E402

TABLES = ("pairs", "items", "samples", "steps", "images", "quarantine")
EXPORT = "exports/train.jsonl"
ROWS = 60_000
EXPORT_LINES = 100_000
BLOBS = 40


def release_id(seq: int) -> str:
    return f"r{seq:04d}"


def row_counts(seq: int, rows: int = ROWS) -> dict[str, int]:
    return {name: rows + seq + i for i, name in enumerate(TABLES)}


def staged(root: Path, seq: int) -> Path:
    return root / "staging" / str(seq)


def stage(root: Path, seq: int, rows: int = ROWS) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = staged(root, seq)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seq)
    for name, n in row_counts(seq, rows).items():
        table = pa.table({
            "key": np.arange(n, dtype=np.int64),
            "score": rng.random(n),
            "text": pa.array(rng.integers(0, 1 << 40, n)).cast(pa.string()),
        })
        pq.write_table(table, folder / f"{name}.parquet", compression="zstd")
    export = root / "staging" / "train.jsonl"
    if not export.exists():
        lines = (json.dumps({"id": i, "text": f"step {i} of a rollout"}) + "\n" for i in range(EXPORT_LINES))
        export.write_text("".join(lines))
    blobs = root / "images"
    blobs.mkdir(exist_ok=True)
    for i in range(BLOBS):
        blob = blobs / f"{i:04d}.bin"
        if not blob.exists():
            blob.write_bytes(bytes([i % 256]) * 4096)


class TimedStore(ReleaseStore):
    """Notes when the release folder is written, so a test can aim kills before or after it."""

    written_at = 0.0

    def publish(self, *args: Any, **kwargs: Any) -> tuple[Manifest, bool]:
        try:
            return super().publish(*args, **kwargs)
        finally:
            self.written_at = time.perf_counter()


EVENTS: list[str] = []


def install_events(pause_at: str) -> None:
    """Wrap the steps a publish is made of so each is an event (module docstring). `pause_at` lists
    pause points, comma-separated: "N" (the N-th event) or "NAME#K" (the K-th event called NAME,
    e.g. os.replace#2). At each the helper prints `event <point> <name>` and waits for a line on
    stdin before taking the step (no line ever: it waits until it is killed)."""
    import os
    import shutil

    import duckdb

    points = [p for p in pause_at.split(",") if p]
    seen: dict[str, int] = {}

    def event(name: str) -> None:
        EVENTS.append(name)
        seen[name] = seen.get(name, 0) + 1
        for point in points:
            want_name, _, want_k = point.partition("#")
            if (want_k and name == want_name and seen[name] == int(want_k)) or (not want_k and str(len(EVENTS)) == point):
                print(f"event {point} {name}", flush=True)
                if not sys.stdin.readline():  # no one will say go on: stay here until killed
                    while True:
                        time.sleep(60)

    def wrap(owner, attr: str) -> None:
        original = getattr(owner, attr)

        def step(*args, **kwargs):
            event(f"{owner.__name__}.{attr}")
            return original(*args, **kwargs)

        setattr(owner, attr, step)

    for owner, attr in ((os, "fsync"), (os, "replace"), (os, "rename"), (os, "link"), (shutil, "copyfile"),
                        (shutil, "copy2")):
        wrap(owner, attr)
    try:
        import obstore  # a bucket root's writes and reads are the steps there (the `scale` extra)
    except ImportError:
        obstore = None
    for attr in ("put", "delete", "get", "head") if obstore is not None else ():
        wrap(obstore, attr)

    class Connection:
        """A DuckDB connection whose statements are events."""

        def __init__(self, con):
            self._con = con

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self._con.__exit__(*exc)

        def execute(self, *args, **kwargs):
            event("duckdb.execute")
            return self._con.execute(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self._con, name)

    connect = duckdb.connect
    duckdb.connect = lambda *args, **kwargs: Connection(connect(*args, **kwargs))


def publish(root: Path, seq: int, keep: int) -> dict:
    folder = staged(root, seq)
    store = TimedStore(root / "releases")
    started = time.perf_counter()
    manifest, published, pruned, _ = publish_release(
        store,
        root / "warehouse.duckdb",
        release_id(seq),
        {name: folder / f"{name}.parquet" for name in TABLES},
        keep=keep,
        on_wait=lambda message: print(message, file=sys.stderr, flush=True),
        code_version="test",
        sources={"seq": seq},
        settings={},
        files={EXPORT: root / "staging" / "train.jsonl"},
        bulk={"exports/images": {p.name: p for p in sorted((root / "images").glob("*.bin"))}},
        rendered={"exports/meta.json": lambda final: json.dumps({"root": str(final)}).encode()},
    )
    return {"release_id": manifest.release_id, "published": published, "pruned": pruned, "rows": manifest.row_counts,
            "writing_s": store.written_at - started, "seconds": time.perf_counter() - started, "events": EVENTS}


def assert_release_complete(store: ReleaseStore, rid: str) -> None:
    """Every file the manifest names is there, with its checksum, size and row count."""
    import hashlib

    import pyarrow.parquet as pq

    manifest, folder = store.manifest(rid), store.path(rid)
    for entry in manifest.tables.values():
        file = folder / entry["file"]
        assert hashlib.sha256(file.read_bytes()).hexdigest() == entry["sha256"], file
        assert file.stat().st_size == entry["bytes"], file
        assert pq.ParquetFile(file).metadata.num_rows == entry["rows"], file
    for rel, entry in manifest.files.items():
        assert hashlib.sha256((folder / rel).read_bytes()).hexdigest() == entry["sha256"], rel
    for rel, entry in manifest.bulk.items():
        assert sum(1 for p in (folder / rel).rglob("*") if p.is_file()) == entry["files"], rel


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", help="the data root: a folder, or s3://bucket/prefix for --rollback and --prune")
    parser.add_argument("seq", type=int)
    parser.add_argument("--keep", type=int, default=3)
    parser.add_argument("--go", action="store_true")
    parser.add_argument("--fsize", type=int, default=0)
    parser.add_argument("--pause-at", default="", help="stop just before event N, or NAME#K (see the docstring)")
    parser.add_argument("--rollback", default="", metavar="REF", help="roll back to REF instead of publishing")
    parser.add_argument("--prune", action="store_true", help="prune to --keep releases instead of publishing")
    parser.add_argument("--tag", default="", metavar="NAME=REF", help="tag REF as NAME instead of publishing")
    args = parser.parse_args()
    install_events(args.pause_at)

    if args.fsize:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (args.fsize, args.fsize))
    if args.go:
        print("ready", flush=True)
        sys.stdin.readline()
    try:
        if args.rollback or args.prune or args.tag:  # the lifecycle's writes, under the same events as a publish
            from pipeline.settings import Layout
            from warehouse import lifecycle

            layout = Layout(args.root)
            if args.tag:
                name, _, ref = args.tag.partition("=")
                result = {"tagged": lifecycle.tag(layout, name, ref)[1], "events": EVENTS}
            elif args.rollback:
                rolled = lifecycle.rollback(layout, args.rollback)
                result = {"release_id": rolled.release, "previous": rolled.previous, "events": EVENTS}
            else:
                result = {"pruned": lifecycle.prune(layout, args.keep, 0.0), "events": EVENTS}
        else:
            result = publish(Path(args.root), args.seq, args.keep)
    except PublishError as exc:
        print(exc, file=sys.stderr)
        return 3
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
