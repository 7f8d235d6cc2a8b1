"""RLAIF-V parquet → `rlaifv_pairs` and `rlaifv_images` (+ the hashes for dedupe), streamed.

One row upstream is one preference pair: a question over one image (HF `Image()`: bytes and a
path), the chosen and the rejected response, and provenance (`ds_name`, `origin_dataset`, and
`origin_split`, a small dict written as text: the model that wrote the responses, the model that
judged them, the question type). An image is keyed by its content (`sha256:<hex>`): pairs over the
same image share one `rlaifv_images` row. Shards are ~1 GB with ~6,000 rows, so they are read
BATCH_ROWS rows at a time and no image's bytes are kept past its batch.

The pair id is `rlaifv:<idx>`: upstream's own id, the same in every mirror and whatever the
sharding. Upstream does not promise one idx per pair (RLAIF-V builds several pairs per question
and image), so a repeated idx is no fault: the first row with an idx is `rlaifv:<idx>`, the n-th
(in read order, across shards too) `rlaifv:<idx>#<n>` (n = 2, 3, ...), and it publishes like any
other pair (one that also repeats an earlier pair's image, question and both responses is marked
`exact_duplicate_of` it, below). A row without an idx gets `rlaifv:<shard name>#<row in shard>`.
Those two (`#<n>`, the row) hold for a pinned revision and the same shards read only. An idx may
hold '#' itself, so the id one row's rule makes may already have been given to another row (idx
`7#2` after a second row of idx 7): the row then counts on (`rlaifv:7#2#2`), and no two rows ever
share an id.

Refusals: a whole shard that cannot be read, lacks the columns, has a column whose Arrow type
drifted from the upstream format (pipeline/rlaifv/contract.py: SHARD, checked before any row is
read), holds no rows, or has every row refused, is an unusable file (stage `file`: it blocks the
release by default); a pair breaking its record contract (non-empty question and responses,
responses that differ beyond whitespace, one image) is quarantined at `parse` by
`pipeline.contract.enforce`; an image that does not decode is `corrupt` and quarantined at
`decode` (its pair stays, as for VL-RewardBench).

Duplicate pairs are marked, not removed (the training export decides): `dup_group` names the
pairs asking the same question (lower-cased, whitespace collapsed) of the same image, by the
group's smallest pair id; `exact_duplicate_of` names, on a pair that repeats an earlier one's
image, question and both responses, the first such pair in file order. Near-duplicate images are
the shared dedupe's concern, not this one's.
"""

from __future__ import annotations

import ast
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import polars as pl
import pyarrow as pa

from pipeline.contract import enforce
from pipeline.embedded import checked_batches, image_pool
from pipeline.dedupe.hashing import HashedImage
from pipeline.imaging import ImageStore
from pipeline.quarantine import FILE_STAGE, Rejection, utf8_text, whole_file_faults
from pipeline.rlaifv.contract import SHARD, contracts
from pipeline.settings import QualitySettings, ZipLimits
from pipeline.staging import streaming_parquet

DATASET = "rlaifv"
BATCH_ROWS = 64  # rows (with their images) held at once
MARKS = ("dup_group", "exact_duplicate_of")  # derived over the whole table, after the contract
# the training export's marks (pipeline/rlaifv/export.py): not the parser's
EXPORT_MARKS = ("image_cluster", "is_duplicate", "duplicate_of", "is_contaminated", "leak", "leaked_from", "in_export",
                "excluded_reason")

_C = contracts(QualitySettings())
_ARROW = {"string": pa.string(), "int": pa.int32(), "bool": pa.bool_()}
PAIRS_SCHEMA = pa.schema([(n, _ARROW[k]) for n, k in _C["rlaifv_pairs"].columns.items() if n not in EXPORT_MARKS])
_READ_SCHEMA = pa.schema([f for f in PAIRS_SCHEMA if f.name not in MARKS])
IMAGES_SCHEMA = pa.schema([(n, pa.int64() if n == "bytes" else _ARROW[k]) for n, k in _C["rlaifv_images"].columns.items()])
_META = {"origin_model": "model", "origin_feedback_model": "feedback_model", "origin_type": "type"}


@dataclass
class Parsed:
    pairs: pa.Table
    images: pa.Table
    rejected: list[Rejection] = field(default_factory=list)
    hashed: list[HashedImage] = field(default_factory=list)

    def tables(self) -> dict[str, pa.Table]:
        return {"rlaifv_pairs": self.pairs, "rlaifv_images": self.images}


def origin_meta(text: str | None) -> dict | None:
    """`origin_split` as a dict when it is one: JSON first, then a Python literal (upstream wrote
    some with single quotes), read by `ast.literal_eval`, which builds values and runs nothing.
    Anything else (plain text, a list, NaN) is None: the raw text stays in `origin_split`."""
    if not text or not text.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError:
        try:
            value = ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
    return _plain(value) if isinstance(value, dict) else None


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _plain(value):
    """A parsed value as JSON text and Arrow can hold it: string keys, lists for tuples and sets,
    valid UTF-8 (a JSON escape can make a lone surrogate), text for infinities and other types."""
    if isinstance(value, dict):
        return {utf8_text(str(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v) for v in value), key=repr)
    if isinstance(value, str):
        return utf8_text(value)
    if value is None or isinstance(value, (int, bool)) or (isinstance(value, float) and math.isfinite(value)):
        return value
    return repr(value)


def _text(value) -> str | None:
    return value if isinstance(value, str) else None if value is None else str(value)


def parse_rlaifv(files: list[Path], limits: ZipLimits, quality: QualitySettings = QualitySettings(),
                 root: Path | None = None, progress: Callable[[int], None] | None = None,
                 store: ImageStore | None = None) -> Parsed:
    """Every shard of `files` (relative names under `root` in messages), streamed BATCH_ROWS rows
    at a time. Given a `store`, each image that decodes is kept there once, content-addressed (its
    `store_path` in rlaifv_images), for the training export: the shards are read once per run."""
    parts, images, rejected, hashed = [], {}, [], []
    seen: dict[str, int] = {}  # pair id given -> the last n given to a row whose own id is it (`_pair`)
    read: dict[int, list] = {}  # per shard read whole: [its name, rows]; and each pair's shard
    origin: dict[str, int] = {}
    done = 0
    with image_pool(files, "rlaifv images") as pool:
        for number, path in enumerate(files):
            name = Path(path).relative_to(root).as_posix() if root else Path(path).name
            problem = SHARD.parquet_problem(path)
            if problem:
                rejected.append(Rejection(DATASET, FILE_STAGE, name, problem))
                continue
            pf = streaming_parquet(path)
            columns = [c for c in (*SHARD.required, *SHARD.optional) if c in pf.schema_arrow.names]
            read[number] = [name, 0]
            try:
                batches = (b.to_pylist() for b in pf.iter_batches(batch_size=BATCH_ROWS, columns=columns))
                for batch_rows, keys, checked_images in checked_batches(DATASET, batches, images, limits, pool, store):
                    batch_pairs = []
                    for row, key in zip(batch_rows, keys):
                        pair = _pair(row, Path(path).name, read[number][1], seen)
                        read[number][1] += 1
                        done += 1
                        origin[pair["pair_id"]] = number
                        if key is not None:
                            pair["image_key"] = key
                            if key not in images:
                                images[key], h, bad = checked_images[key]
                                rejected.extend([bad] if bad else [])
                                hashed.extend([h] if h else [])
                        batch_pairs.append(pair)
                    # kept as Arrow, not as dicts: a shard's pairs would weigh several times more as Python objects
                    parts.append(pa.RecordBatch.from_pylist(batch_pairs, schema=_READ_SCHEMA))
                    if progress:
                        progress(done)
            except (OSError, pa.ArrowException) as exc:  # a shard damaged past its footer: what was read stays, the file is named
                rejected.append(Rejection(DATASET, FILE_STAGE, name, f"unreadable after {read[number][1]} rows: {exc}"))
                del read[number]
    checked = enforce(DATASET, {"rlaifv_pairs": pa.Table.from_batches(parts, schema=_READ_SCHEMA)}, contracts(quality))
    rejected.extend(checked.rejected)
    kept = checked.tables["rlaifv_pairs"]
    per_file = Counter(origin[pid] for pid in kept["pair_id"].to_pylist())
    rejected.extend(whole_file_faults(DATASET, [(name, n, per_file[k]) for k, (name, n) in read.items()]))
    table = pa.Table.from_pylist(sorted(images.values(), key=lambda r: r["image_key"]), schema=IMAGES_SCHEMA)
    return Parsed(mark_duplicates(kept), table, rejected, sorted(hashed, key=lambda h: h.key))


def _pair(row: dict, shard: str, row_in_file: int, seen: dict[str, int]) -> dict:
    idx = _text(row.get("idx"))
    # The row's own id; when given already (a repeated idx), the first `<own>#<n>` not given yet,
    # n counting on from the last one given for it (2 for the first repeat): the ids given so far
    # are `seen`'s keys, so no two rows share one, whichever rule made it.
    pid = own = f"rlaifv:{idx}" if idx and idx.strip() else f"rlaifv:{shard}#{row_in_file}"
    n = seen.get(own, 0)
    if n:
        n += 1
        while f"{own}#{n}" in seen:
            n += 1
        pid = f"{own}#{n}"
    seen[own] = max(n, 1)
    seen.setdefault(pid, 1)
    question, chosen, rejected_text = (_text(row.get(c)) for c in ("question", "chosen", "rejected"))
    split = _text(row.get("origin_split"))
    meta = origin_meta(split)
    return {
        "pair_id": pid, "question": question, "chosen": chosen, "rejected": rejected_text,
        # the same answer twice teaches nothing, whatever its spacing
        "responses_differ": (None if chosen is None or rejected_text is None
                             else chosen.split() != rejected_text.split()),
        "image_key": None, "ds_name": _text(row.get("ds_name")), "origin_dataset": _text(row.get("origin_dataset")),
        "origin_split": split,
        **{column: _text(meta.get(key)) if meta else None for column, key in _META.items()},
        "origin_meta": json.dumps(meta, sort_keys=True, ensure_ascii=False) if meta is not None else None,
        "idx": idx, "image_path": _text(row.get("image_path")), "source_file": shard, "row_in_file": row_in_file,
    }


def mark_duplicates(pairs: pa.Table) -> pa.Table:
    """`pairs` with MARKS appended: each pair's same-image-same-question group (None when alone)
    and, on an exact repeat, the first pair it repeats."""
    frame = pl.from_arrow(pairs.select(["pair_id", "image_key", "question", "chosen", "rejected"]))
    asked = ["image_key", pl.col("question").str.to_lowercase().str.replace_all(r"\s+", " ").str.strip_chars()]
    first = pl.col("pair_id").first().over(*asked, "chosen", "rejected")
    marks = frame.select(
        dup_group=pl.when(pl.len().over(*asked) > 1).then(pl.col("pair_id").min().over(*asked)),
        exact_duplicate_of=pl.when(first != pl.col("pair_id")).then(first),
    ).to_arrow()
    for name in MARKS:
        pairs = pairs.append_column(PAIRS_SCHEMA.field(name), marks[name].cast(pa.string()))
    return pairs


def sample_records(root: Path) -> dict[str, pa.Table]:
    """The record tables this parser makes of the embedded sample (written under `root`), its
    record contract enforced (DatasetSpec.sample_records: tests derive their cases from it)."""
    from pipeline.rlaifv.sample import SHARDS, write_rlaifv_sample

    write_rlaifv_sample(Path(root))
    parsed = parse_rlaifv([Path(root) / rel for rel in SHARDS], ZipLimits(), QualitySettings(), root=Path(root))
    return {"rlaifv_pairs": parsed.pairs}
