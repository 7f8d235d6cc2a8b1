"""Small helpers the asset modules share: staging keys and metadata."""

import hashlib
import json
import os
import time
import warnings
from pathlib import Path
from typing import Callable, Optional

import dagster as dg
import pyarrow as pa

from pipeline.settings import TRANSFORM_VERSION
from pipeline.sources.base import RawSnapshot
from pipeline.staging import RESULT_FILE, Staged, write_text_atomic
from pipeline.stopping import stop_point


def staging_key(snapshot: Optional[RawSnapshot], extra: Optional[dict] = None, context=None) -> str:
    """Staged outputs are keyed by what they were built from, so reruns overwrite like with like:
    the input checksums, the transform version, `extra` (settings, upstream keys) and, given the
    asset's `context`, that asset's own `code_version` (bumping it after a fix redoes its work)."""
    inputs = snapshot.checksums() if snapshot else None
    code = {"code": TRANSFORM_VERSION, **({"asset_code": asset_code_version(context)} if context is not None else {})}
    blob = json.dumps({"inputs": inputs, **code, **(extra or {})}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def asset_code_version(context) -> Optional[str]:
    """The code_version of the asset being materialized."""
    return context.assets_def.code_versions_by_key.get(context.asset_key)


def raw_metadata(snapshot: Optional[RawSnapshot]) -> dict:
    if snapshot is None:
        return {"present": False}
    md = {f"sha256 {f.role}": f.sha256 for f in snapshot.files}
    md["present"] = True
    md["source"] = snapshot.source
    md["root"] = dg.MetadataValue.path(snapshot.root)
    md["bytes"] = dg.MetadataValue.int(sum(f.size for f in snapshot.files))
    return md


def fetch_output(context, fetcher: Callable, rewardhouse, dataset: str) -> dg.Output:
    """A raw asset's body: fetch with the configured source, turn a SourceError into a Failure that
    says what to do, and report an absent dataset (a local folder without it) as None."""
    from pipeline.sources.base import SourceError

    try:
        snapshot = fetcher(rewardhouse.settings(), rewardhouse.layout(), log=context.log.info)
    except SourceError as exc:
        raise dg.Failure(description=str(exc)) from None
    if snapshot is None:
        context.log.warning(f"{dataset} is absent from this source: its tables will be empty")
    return dg.Output(snapshot, metadata=raw_metadata(snapshot))


def snapshot_of(raw) -> Optional[RawSnapshot]:
    """A raw asset's value: its RawSnapshot, or None for an absent dataset."""
    return RawSnapshot.from_dict(raw) if isinstance(raw, dict) else raw


# --- reuse of unchanged work ---------------------------------------------------------------------
# A staged folder is keyed by everything its content depends on (input checksums, code version,
# settings), so a folder that holds a finished result *is* that result: an unchanged nightly run
# reuses it instead of recomputing. The key is also reported as the asset's data version.



def md(text: str) -> dict:
    """Mark a metadata value as markdown (kept JSON-serialisable for the reuse record)."""
    return {"__md__": text}


def to_metadata(plain: dict) -> dict:
    out = {}
    for key, value in plain.items():
        if isinstance(value, dict) and "__md__" in value:
            out[key] = dg.MetadataValue.md(value["__md__"])
        elif isinstance(value, dict):
            out[key] = dg.MetadataValue.json(value)
        else:
            out[key] = value
    return out


def _output(value, metadata: dict, version: str) -> dg.Output:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)  # data_version is beta in Dagster 1.13, and used as designed
        return dg.Output(value, metadata=metadata, data_version=dg.DataVersion(version))


def _finished(folder: Path) -> Optional[tuple[Staged, dict]]:
    """The (hand-off, plain metadata) recorded in a finished staged folder (every file the hand-off
    points at exists), or None."""
    record = folder / RESULT_FILE
    if not record.is_file():
        return None
    try:
        saved = json.loads(record.read_text())
    except ValueError:
        return None
    value = Staged.from_record(saved.get("value"))
    if value is None or not all(Path(f).exists() for f in value.files()):
        return None
    return value, saved.get("metadata", {})


def recorded(folder: Path) -> Optional[Staged]:
    """The hand-off recorded in a finished staged folder, or None."""
    saved = _finished(folder)
    return saved[0] if saved else None


def reuse_or_compute(log, folder: Path, compute: Callable[[], tuple[Staged, dict]]) -> tuple[Staged, dict, bool]:
    """The recorded (value, plain metadata) of `folder` if it is complete, else run `compute`
    (which writes the staged files under `folder` and returns them) and record it. The last item
    says whether the record was reused."""
    saved = _reused(log, folder)
    if saved:
        return saved
    stop_point()
    value, plain = compute()
    _record(folder, value, plain)
    return value, plain, False


def _reused(log, folder: Path) -> Optional[tuple[Staged, dict, bool]]:
    """A finished folder's record, its last use marked (for `rewardhouse gc`); None if unfinished."""
    saved = _finished(folder)
    if not saved:
        return None
    log.info(f"inputs unchanged: reusing {folder}")
    os.utime(folder / RESULT_FILE)
    return saved[0], saved[1], True


def _record(folder: Path, value: Staged, plain: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    record = {"value": value.to_record(), "metadata": plain}
    write_text_atomic(folder / RESULT_FILE, json.dumps(record, sort_keys=True, default=str))


def reuse_or_compute_parts(log, parts: dict[str, tuple[Path, Callable[[], tuple[dict, dict]]]],
                           write: Callable[[Path, dict], dict[str, str]]) -> dict[str, tuple[Staged, dict, bool]]:
    """reuse_or_compute for several parts in turn (key -> (folder, compute)), where `compute`
    returns the part's (tables, plain metadata) and `write(folder, tables)` writes its staged files
    (staging.write_staged): each part's files are written, and its record after them, on one
    background thread while the next part computes, so a step that keeps every core busy computing
    (hashing over a pool) does not also wait for its writes. A part is recorded only once its files
    are written; the step returns, or raises, only after every write it started has ended; a write
    that fails stops the next part from starting and raises its error."""
    from concurrent.futures import ThreadPoolExecutor

    def finish(folder: Path, tables: dict, plain: dict) -> tuple[Staged, dict, bool]:
        value = Staged(tables=write(folder, tables))
        _record(folder, value, plain)
        return value, plain, False

    folders = [folder for folder, _ in parts.values()]
    if len(set(folders)) != len(folders):
        raise ValueError("reuse_or_compute_parts: each part needs a folder of its own")
    out: dict[str, tuple[Staged, dict, bool]] = {}
    pending: dict = {}
    with ThreadPoolExecutor(1, thread_name_prefix="staged parts") as writer:
        for key, (folder, compute) in parts.items():
            for done in [f for f in pending.values() if f.done()]:
                done.result()  # a failed write raises here, before more work
            saved = _reused(log, folder)
            if saved:
                out[key] = saved
                continue
            stop_point()
            tables, plain = compute()
            pending[key] = writer.submit(finish, folder, tables, plain)
            del tables
        for key, future in pending.items():
            out[key] = future.result()
    return {key: out[key] for key in parts}


def reuse_or_run(context, folder: Path, compute: Callable[[], tuple[Staged, dict]]) -> dg.Output:
    """reuse_or_compute as an asset's Output, the folder's key as its data version."""
    value, plain, reused = reuse_or_compute(context.log, folder, compute)
    return _output(value, {**to_metadata(plain), "reused": reused}, folder.name)


def plain_counts(tables: dict[str, pa.Table]) -> dict:
    return {f"rows_{name}": t.num_rows for name, t in tables.items()}


def preview(table: pa.Table, n: int = 5, columns: Optional[list[str]] = None, width: int = 48) -> dict:
    """The first rows of a table as a markdown table, long cells cut."""
    table = table.select(columns) if columns else table
    def cell(v) -> str:
        text = "" if v is None else str(v)
        text = text.replace("|", "\\|").replace("\n", " ")
        return text if len(text) <= width else text[: width - 1] + "…"
    lines = ["| " + " | ".join(table.column_names) + " |", "|" + "---|" * table.num_columns]
    lines += ["| " + " | ".join(cell(v) for v in row.values()) + " |" for row in table.slice(0, n).to_pylist()]
    return md("\n".join(lines) + f"\n\n{table.num_rows} rows")


def bars(rows: list[tuple[str, float, str]], width: int = 30) -> dict:
    """A markdown bar chart: (label, value in 0..1, shown text) per row."""
    lines = ["| | | |", "|---|---|---|"]
    lines += [f"| {label} | `{'█' * round(value * width)}{'░' * (width - round(value * width))}` | {text} |"
              for label, value, text in rows]
    return md("\n".join(lines))


def progress_logger(context, label: str, every: float = 5.0) -> Callable[[int, int, float], None]:
    """A progress(done, total, rate) callback that logs done/total, rate and ETA at most every
    `every` seconds (and at the end)."""
    last = [0.0]

    def report(done: int, total: int, rate: float) -> None:
        stop_point()
        now = time.monotonic()
        if done == total or now - last[0] >= every:
            last[0] = now
            eta = (total - done) / rate if rate > 0 else 0.0
            context.log.info(f"{label} {done}/{total} images ({rate:.0f} images/s, ETA {eta:.0f}s)")

    return report


def export_metadata(rows: int, images: int, removed: dict) -> dict:
    """A training export's materialization metadata, the same keys for every train set (the CLI's
    summary reads them): rows, images, and what was left out (`removed_<reason>`; leaks per class
    and eval set as `removed_<class>_leak_of_<eval set>`, per eval set as
    `removed_contaminated_by_<eval set>`)."""
    out = {"rows": rows, "images": images}
    for k, v in removed.items():
        if k == "leaks":
            out.update({f"removed_{c}_leak_of_{ev}": n for c, per in v.items() for ev, n in per.items()})
        elif k == "contaminated_by":
            out.update({f"removed_contaminated_by_{ev}": n for ev, n in v.items()})
        else:
            out[f"removed_{k}"] = v
    return out
