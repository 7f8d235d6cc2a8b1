"""VL-RewardBench parquet → `vlrb_pairs` and `vlrb_images` (+ the hashes for dedupe), streamed.

One row upstream is one preference pair: a query, one image (HF `Image()`: bytes and a path), two
responses and their human ranks (0 = preferred). `chosen` is "A" when the first response ranks 0.
An image is keyed by its content (`sha256:<hex>`): pairs over the same image share one
`vlrb_images` row, and the key is the same in every mirror of the data.

Refusals: a whole shard that cannot be read, lacks the columns, has a column whose Arrow type
drifted from the upstream format (pipeline/vlrb/contract.py: SHARD, checked before any row is
read, so ids and rankings are never coerced), holds no rows, or has every row refused, is an
unusable file (stage `file`: it blocks the release by default); a row without an id, or repeating
an earlier id, is quarantined at `parse`; a pair breaking its record contract
(pipeline/vlrb/contract.py: ranking a permutation of (0, 1), two non-empty responses, one image)
is quarantined at `parse` by `pipeline.contract.enforce`; an image that does not decode is
`corrupt` and quarantined at `decode` (its pair stays, as for MMRB2).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow as pa

from pipeline.contract import enforce
from pipeline.embedded import checked_batches, image_pool
from pipeline.dedupe.hashing import HashedImage
from pipeline.quarantine import FILE_STAGE, Rejection, whole_file_faults
from pipeline.settings import QualitySettings, ZipLimits
from pipeline.staging import streaming_parquet
from pipeline.vlrb.contract import SHARD, contracts

DATASET = "vlrb"
BATCH_ROWS = 64  # rows (with their images) held at once

_C = contracts(QualitySettings())
_ARROW = {"string": pa.string(), "int": pa.int32()}
PAIRS_SCHEMA = pa.schema([(n, _ARROW[k]) for n, k in _C["vlrb_pairs"].columns.items()])
IMAGES_SCHEMA = pa.schema([(n, pa.int64() if n == "bytes" else _ARROW[k]) for n, k in _C["vlrb_images"].columns.items()])


@dataclass
class Parsed:
    pairs: pa.Table
    images: pa.Table
    rejected: list[Rejection] = field(default_factory=list)
    hashed: list[HashedImage] = field(default_factory=list)

    def tables(self) -> dict[str, pa.Table]:
        return {"vlrb_pairs": self.pairs, "vlrb_images": self.images}


def _text(value) -> str | None:
    return value if isinstance(value, str) else None if value is None else str(value)


def parse_vlrb(files: list[Path], limits: ZipLimits, quality: QualitySettings = QualitySettings(),
               root: Path | None = None, progress: Callable[[int], None] | None = None) -> Parsed:
    """Every shard of `files` (relative names under `root` in messages), streamed BATCH_ROWS rows at a time."""
    pairs, images, rejected, hashed = [], {}, [], []
    seen: dict[str, int] = {}
    read: dict[int, list] = {}  # per shard read whole: [its name, rows]; and each pair's shard
    origin: dict[str, int] = {}
    done = 0
    with image_pool(files, "vlrb images") as pool:
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
                for batch_rows, keys, checked_images in checked_batches(DATASET, batches, images, limits, pool):
                    for row, key in zip(batch_rows, keys):
                        done += 1
                        read[number][1] += 1
                        pair = _pair(row, done, seen, rejected)
                        if pair is None:
                            continue
                        origin[pair["pair_id"]] = number
                        if key is not None:
                            pair["image_key"] = key
                            if key not in images:
                                images[key], h, bad = checked_images[key]
                                rejected.extend([bad] if bad else [])
                                hashed.extend([h] if h else [])
                        pairs.append(pair)
                    if progress:
                        progress(done)
            except (OSError, pa.ArrowException) as exc:  # a shard damaged past its footer: what was read stays, the file is named
                rejected.append(Rejection(DATASET, FILE_STAGE, name, f"unreadable after {done} rows: {exc}"))
                del read[number]
    parsed = pa.Table.from_pylist(pairs, schema=PAIRS_SCHEMA)
    checked = enforce(DATASET, {"vlrb_pairs": parsed}, contracts(quality))
    rejected.extend(checked.rejected)
    kept = Counter(origin[pid] for pid in checked.tables["vlrb_pairs"]["pair_id"].to_pylist())
    rejected.extend(whole_file_faults(DATASET, [(name, n, kept[k]) for k, (name, n) in read.items()]))
    table = pa.Table.from_pylist(sorted(images.values(), key=lambda r: r["image_key"]), schema=IMAGES_SCHEMA)
    return Parsed(checked.tables["vlrb_pairs"], table, rejected, sorted(hashed, key=lambda h: h.key))


def _pair(row: dict, number: int, seen: dict, rejected: list) -> dict | None:
    pid = _text(row.get("id"))
    if not pid:
        rejected.append(Rejection(DATASET, "parse", f"row {number}", "row has no id"))
        return None
    if pid in seen:
        rejected.append(Rejection(DATASET, "parse", pid, f"id repeats row {seen[pid]}; the first is kept"))
        return None
    seen[pid] = number
    responses = row.get("response")
    responses = list(responses) if isinstance(responses, list) else []
    ranking = row.get("human_ranking")
    models = row.get("models") if isinstance(row.get("models"), list) else []
    chosen = {(0, 1): "A", (1, 0): "B"}.get(tuple(ranking) if isinstance(ranking, list) else None)
    return {
        "pair_id": pid, "query": _text(row.get("query")),
        "response_a": _text(responses[0]) if len(responses) > 0 else None,
        "response_b": _text(responses[1]) if len(responses) > 1 else None,
        "chosen": chosen,
        "model_a": _text(models[0]) if len(models) > 0 else None,
        "model_b": _text(models[1]) if len(models) > 1 else None,
        "judge": _text(row.get("judge")), "rationale": _text(row.get("rationale")),
        "query_source": _text(row.get("query_source")), "ground_truth": _text(row.get("ground_truth")),
        "image_key": None,
        "human_ranking": json.dumps(ranking) if ranking is not None else None,
        "n_responses": len(responses),
    }


def sample_records(root: Path) -> dict[str, pa.Table]:
    """The record tables this parser makes of the embedded sample (written under `root`), its
    record contract enforced (DatasetSpec.sample_records: tests derive their cases from it)."""
    from pipeline.vlrb.sample import RELPATH, write_vlrb_sample

    write_vlrb_sample(Path(root))
    return {"vlrb_pairs": parse_vlrb([Path(root) / RELPATH], ZipLimits(), QualitySettings()).tables()["vlrb_pairs"]}
