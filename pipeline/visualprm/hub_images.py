"""VisualPRM path references resolved from OpenGVLab's image archives on the Hub without
downloading them: the (split) archive's central directory is read from its end by HTTP range
requests, and only the entries the references need are fetched, by range, each with its CRC and
size checked. A fetched entry goes straight into the content-addressed image store (one copy on
disk), and an index file maps the archive's entry names to it; the index then serves as one more
image root (`HubRoot`). A rerun, or a run after a kill, fetches only what the index lacks. A byte
budget bounds a run; before fetching, the log says what a full resolve costs against the archive.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import time
import urllib.request
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable

from pipeline.quarantine import Rejection
from pipeline.sources.http_archive import HttpParts, RangeError, entry_span, fetch_entry
from pipeline.visualprm.images import SuffixIndex, suffix_matches

DATASET = "visualprm"
IMAGE_REPO = "OpenGVLab/VisualPRM400K"
PART = re.compile(r"^images\.zip(_[a-z]{2,3})?$")

Log = Callable[[str], None]


@dataclass
class HubResolve:
    """What resolving against the Hub archive did, for the run log, metadata and manifest."""

    repo: str
    revision: str
    archive_bytes: int
    references: int = 0  # path references asked about
    in_archive: int = 0  # of which the archive holds
    planned_bytes: int = 0  # a full resolve: the directory read and every entry needed
    fetched_bytes: int = 0  # this run
    requests: int = 0
    entries_fetched: int = 0
    entries_cached: int = 0
    over_budget: int = 0
    damaged: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n} B"


def hub_parts(repo: str, revision: str | None, endpoint: str | None, token: str | None) -> tuple[str, list[str]]:
    """(commit sha, the archive's part names in order) of `repo` at `revision` (default main)."""
    from huggingface_hub import HfApi

    info = HfApi(endpoint=endpoint, token=token).repo_info(repo, repo_type="dataset", revision=revision or "main")
    names = sorted(s.rfilename for s in info.siblings or [] if PART.match(s.rfilename))
    if "images.zip" in names and len(names) > 1:
        names = ["images.zip"]
    if not names:
        raise RangeError(f"{repo}@{info.sha[:12]} has no images.zip or images.zip_aa…")
    return info.sha, names


def open_archive(repo: str, sha: str, names: list[str], endpoint: str | None, headers: dict[str, str],
                 opener: urllib.request.OpenerDirector) -> HttpParts:
    from huggingface_hub import hf_hub_url

    urls = [hf_hub_url(repo, n, repo_type="dataset", revision=sha, endpoint=endpoint) for n in names]
    sizes = []
    for url in urls:
        with opener.open(urllib.request.Request(url, method="HEAD", headers=headers), timeout=60) as resp:
            sizes.append(int(resp.headers.get("X-Linked-Size") or resp.headers["Content-Length"]))
    return HttpParts(urls, sizes, headers=headers, opener=opener)


def _index(infos: list[zipfile.ZipInfo]) -> dict[str, list[tuple[tuple[str, ...], zipfile.ZipInfo]]]:
    by_name: dict[str, list] = {}
    for info in infos:
        if not info.is_dir():
            parts = PurePosixPath(info.filename).parts
            by_name.setdefault(parts[-1], []).append((parts, info))
    return by_name


def _match(by_name, ref: str) -> zipfile.ZipInfo | None:
    """The entry a local root would answer `ref` with (see `images.suffix_matches`); a tie is none."""
    found, _ = suffix_matches(by_name, ref)
    return found[0] if len(found) == 1 else None


class HubRoot(SuffixIndex):
    """An image root made of the entries fetched so far: archive entry name -> the stored file.
    References resolve as against a local root (`images.SuffixIndex`)."""

    def __init__(self, index: dict[str, str], store_root: Path, label: str):
        super().__init__()
        self.root = label
        for entry, rel in index.items():
            self._add(PurePosixPath(entry).parts, ("hub", f"{label}!{entry}", str(store_root / rel)))


def _read_index(path: Path) -> dict[str, str]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _write_index(path: Path, index: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    tmp.write_text(json.dumps(index, sort_keys=True))
    os.replace(tmp, path)


def _format(data: bytes) -> str | None:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            return im.format
    except Exception:  # not an image: the inventory calls it corrupt
        return None


def resolve_from_hub(refs: set[str], store, index_path: Path, source: HttpParts, repo: str, sha: str, *,
                     budget_bytes: int, log: Log = lambda s: None, every: float = 5.0,
                     save_every: int = 200) -> tuple[HubResolve, list[Rejection], HubRoot]:
    """Fetch the entries of the archive behind `source` that answer `refs` and the index at
    `index_path` lacks, within `budget_bytes` (0: no limit), into the content-addressed `store`
    (an `images.ImageStore`). Returns the report, the rejections of entries whose bytes stayed
    damaged after a second fetch, and the root the index now makes."""
    index = _read_index(index_path)
    index = {e: rel for e, rel in index.items() if (store.root / rel).is_file()}
    zf = zipfile.ZipFile(source)
    directory = source.traffic.bytes
    by_name = _index(zf.infolist())
    report = HubResolve(repo, sha, source.size, references=len(refs))
    todo = []
    for ref in sorted(refs):
        info = _match(by_name, ref)
        if info is None:
            continue
        report.in_archive += 1
        if info.filename in index:
            report.entries_cached += 1
            continue
        todo.append((ref, info))
    need = sum(entry_span(info)[1] for _, info in todo)
    report.planned_bytes = directory + need
    log(f"hf images: {report.in_archive} of {len(refs)} path references are in {repo}@{sha[:12]} "
        f"({_human(source.size)}); a full resolve fetches {_human(report.planned_bytes)} "
        f"({100 * report.planned_bytes / max(source.size, 1):.2f} % of the archive), {report.entries_cached} entries already here, "
        f"{len(todo)} to fetch ({_human(need)})" + (f"; budget {_human(budget_bytes)}" if budget_bytes else ""))
    rejected: list[Rejection] = []
    started = said = time.monotonic()
    fetched = 0
    for ref, info in todo:
        span = entry_span(info)[1]
        if budget_bytes and source.traffic.bytes + span > budget_bytes:
            report.over_budget += 1
            continue
        try:
            data = fetch_entry(zf, source, info)
        except zipfile.BadZipFile as exc:
            report.damaged.append(ref)
            rejected.append(Rejection(DATASET, "resolve", ref,
                                      f"damaged in {repo}@{sha[:12]} ({info.filename}): {exc}; fetched twice"))
            continue
        index[info.filename] = store.put(hashlib.sha256(data).hexdigest(), _format(data), data)
        fetched += span
        report.entries_fetched += 1
        if report.entries_fetched % save_every == 0:  # a kill loses at most this many fetches
            _write_index(index_path, index)
        now = time.monotonic()
        if now - said >= every:
            rate = fetched / max(now - started, 1e-9)
            left = need - fetched
            log(f"hf images: fetched {_human(fetched)} of {_human(need)} ({_human(rate)}/s, ETA {left / max(rate, 1):.0f} s)")
            said = now
    _write_index(index_path, index)
    report.fetched_bytes, report.requests = source.traffic.bytes, source.traffic.requests
    if report.over_budget:
        log(f"hf images: {report.over_budget} entries left unfetched: over the budget of {_human(budget_bytes)}")
    log(f"hf images: fetched {_human(report.fetched_bytes)} in {report.requests} requests "
        f"({report.entries_fetched} entries; {len(report.damaged)} damaged)")
    return report, rejected, HubRoot(index, store.root, f"hf://datasets/{repo}@{sha[:12]}")
