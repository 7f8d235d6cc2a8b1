"""What the two fixture datasets share: their upstream format (parquet shards, one row per
record, the picture embedded as HF `Image()` bytes), a picture generator and a streaming parser
built only from the project's generic modules. Nothing here names a real dataset, and nothing of
the project names these: they exist to prove that a dataset of either role plugs in by its own
folder and one registry line (tests/test_new_datasets.py)."""

from __future__ import annotations

import io
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image, ImageDraw

from pipeline.contract import FileColumns, enforce
from pipeline.dedupe.hashing import HashedImage, default_workers
from pipeline.embedded import check_images
from pipeline.imaging import ImageStore
from pipeline.quarantine import FILE_STAGE, Rejection, whole_file_faults
from pipeline.settings import ZipLimits
from pipeline.sources.base import write_if_changed
from pipeline.staging import streaming_parquet

IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
WORDS = ("red", "blue", "circle", "square", "left", "right", "above", "below", "count", "shapes", "largest",
         "smallest", "colour", "corner", "middle", "line", "crossing", "how", "many", "which", "is", "the", "of",
         "near", "green", "yellow", "stripe", "dot", "triangle", "edge", "picture", "shown")


def picture(seed: int, side: int = 160) -> bytes:
    """A PNG of random shapes on a random background: every seed its own picture."""
    rng = random.Random(seed)
    img = Image.new("RGB", (side, side), tuple(rng.randrange(256) for _ in range(3)))
    draw = ImageDraw.Draw(img)
    for _ in range(12):
        x0, y0 = rng.randrange(side), rng.randrange(side)
        box = (x0, y0, x0 + rng.randrange(8, side // 2), y0 + rng.randrange(8, side // 2))
        colour = tuple(rng.randrange(256) for _ in range(3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=colour)
    buf = io.BytesIO()
    img.save(buf, "PNG", optimize=False, compress_level=6)
    return buf.getvalue()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "?"


def write_shard(path: Path, rows: list[dict], schema: pa.Schema) -> None:
    """One shard, byte for byte the same on every call (written only when it changed)."""
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), buf, compression="zstd", row_group_size=16)
    write_if_changed(path, buf.getvalue())


@dataclass
class Parsed:
    records: pa.Table
    images: pa.Table
    rejected: list[Rejection] = field(default_factory=list)
    hashed: list[HashedImage] = field(default_factory=list)


def parse_shards(dataset: str, files: list[Path], shard: FileColumns, schema: pa.Schema, images_schema: pa.Schema,
                 table: str, contracts: dict, record: Callable[[dict], dict | None], limits: ZipLimits,
                 root: Path | None = None, store: ImageStore | None = None) -> Parsed:
    """Rows of every shard -> `record(row, rejected)` (None: refused, its quarantine row appended
    to `rejected`), the row's picture checked once by content; then the record contract of `table`.
    A shard that cannot be read or holds nothing usable is refused whole (stage `file`)."""
    records, images, rejected, hashed, origin, read = [], {}, [], [], {}, {}
    with ThreadPoolExecutor(default_workers(), thread_name_prefix=f"{dataset} images") as pool:
        for number, path in enumerate(files):
            name = Path(path).relative_to(root).as_posix() if root else Path(path).name
            problem = shard.parquet_problem(path)
            if problem:
                rejected.append(Rejection(dataset, FILE_STAGE, name, problem))
                continue
            read[number] = [name, 0]
            for batch in streaming_parquet(path).iter_batches(batch_size=32):
                rows = batch.to_pylist()
                keys, checked = check_images(dataset, rows, images, limits, pool, store)
                for row, key in zip(rows, keys):
                    read[number][1] += 1
                    rec = record(row, rejected)
                    if rec is None:
                        continue
                    rec["image_key"] = key
                    if key is not None and key not in images:
                        images[key], h, bad = checked[key]
                        rejected.extend([bad] if bad else [])
                        hashed.extend([h] if h else [])
                    origin[rec["pair_id"]] = number
                    records.append(rec)
    checked = enforce(dataset, {table: pa.Table.from_pylist(records, schema=schema)}, contracts)
    rejected.extend(checked.rejected)
    kept = {}
    for pid in checked.tables[table]["pair_id"].to_pylist():
        kept[origin[pid]] = kept.get(origin[pid], 0) + 1
    rejected.extend(whole_file_faults(dataset, [(n, c, kept.get(k, 0)) for k, (n, c) in read.items()]))
    inventory = pa.Table.from_pylist(sorted(images.values(), key=lambda r: r["image_key"]), schema=images_schema)
    return Parsed(checked.tables[table], inventory, rejected, sorted(hashed, key=lambda h: h.key))


def images_contract(table: str, store_path: bool = False):
    """A fixture's picture inventory, as every dataset with embedded images keeps it."""
    from pipeline.contract import INT, STRING, TableContract, between, in_set, not_null, sha256, unique, where

    ok = where("status", "ok")
    columns = {"image_key": STRING, "sha256": STRING, "bytes": INT, "width": INT, "height": INT, "format": STRING,
               "status": STRING, **({"store_path": STRING} if store_path else {})}
    return TableContract(table, columns, (
        *not_null("image_key", "sha256", "bytes", "status"), *unique("image_key"), *in_set("status", ("ok", "corrupt")),
        *sha256("sha256"), *not_null("width", "height", when=ok), *between("width", 1, when=ok), *between("bytes", 0),
    ), description="every picture of the pairs, by content")


def images_schema(contract) -> pa.Schema:
    return pa.schema([(n, pa.int64() if n in ("bytes", "width", "height") else pa.string()) for n in contract.columns])


@dataclass(frozen=True)
class Source:
    """A fixture's shards under `repo/glob`: written by `write_sample` for `sample`, found in
    place for `local`; there is no Hub repository behind a fixture."""

    name: str
    repo: str
    glob: str
    write_sample: Callable[[Path], None]

    @property
    def role(self) -> str:
        return f"{self.name}_parquet"

    def snapshot(self, root: Path, source: str, cache, *, revisions: dict | None = None):
        from pipeline.sources import snapshot_shards

        return snapshot_shards(root, self.repo, self.glob, self.role, self.name, source, cache, revisions=revisions)

    def fetch(self, settings, layout, log=lambda s: None):
        from pipeline.sources import fetch_by_source
        from pipeline.sources.base import SourceError

        def hf(cache):
            raise SourceError(f"hf source: {self.name} is a test fixture with no Hub repository; use sample or local")

        return fetch_by_source(settings, layout, self.snapshot, write_sample=self.write_sample,
                               sample_version=(f"{self.name}_sample", "1"), hf=hf)

    def shards(self, snap) -> list[Path]:
        return [Path(f.path) for f in snap.files if f.role.startswith(self.role + ":")] if snap else []


def record_maker(dataset: str, columns: tuple[str, ...]) -> Callable[[dict, list], dict | None]:
    """A row -> its record (`pair_id` from `id`, then `columns`); a row without an id is refused."""

    def record(row: dict, rejected: list) -> dict | None:
        if not row.get("id"):
            rejected.append(Rejection(dataset, "parse", "row without id", "row has no id"))
            return None
        return {"pair_id": row["id"], **{c: row.get(c) for c in columns}}

    return record


def spec_fields(name: str, repo: str, glob: str) -> dict:
    """The DatasetSpec fields the two fixtures fill alike: tables `<name>_pairs` / `<name>_images`,
    their package `tests.fixture_datasets.<name>` (data.py, assets.py), records with a question."""
    package = f"tests.fixture_datasets.{name}"
    return dict(
        name=name, licence="CC0 (generated)", upstream=(), local_layout=(f"{repo}/{glob}",),
        record_table=f"{name}_pairs", record_noun="pairs", image_table=f"{name}_images",
        record_stages=("parse",), image_stages=("decode",),
        fetch=f"{package}.data:fetch", sample=f"{package}.data:write_sample",
        sample_records=f"{package}.data:sample_records", assets=f"{package}.assets",
        raw_asset=f"{name}_raw", image_asset=f"{name}_pairs", record_asset=f"{name}_pairs",
        record_text=f"select pair_id as record, question as text from {name}_pairs",
        record_images=f"select image_key, pair_id as record from {name}_pairs where image_key is not null",
    )
