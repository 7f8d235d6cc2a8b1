"""Reclaim the data root's space: staged work folders, release candidates and GX validation
results (with their Data Docs pages) not used lately.

Every changed input leaves a staged folder behind (they are keyed by input, so an unchanged rerun
can reuse them), and every judged release id a candidate. Nothing published depends on them:
releases hold copies of their files, so removing a folder only means a later run with those same
inputs recomputes it. A folder's last use is the mtime of its `_result.json` (touched whenever a
run reuses it) or `candidate.json`; a folder without either is work a crash left unfinished.
The current release's candidate is always kept, so reruns keep reusing its verdicts.

GX keeps one folder per suite and run under `quality/gx/uncommitted/validations/<suite>/<run>/`,
and its rendered page under `.../data_docs/local_site/validations/<suite>/<run>/`. Runs are named
after the release id they judged; the current release's stay. The Data Docs index drops the
removed runs the next time a run renders it.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.settings import Layout
from pipeline.staging import CANDIDATE_FILE, RESULT_FILE

DAY = 86_400.0


@dataclass
class GcReport:
    removed: list[tuple[Path, int]] = field(default_factory=list)  # (folder, bytes)
    kept: int = 0

    @property
    def freed(self) -> int:
        return sum(size for _, size in self.removed)


def _size(folder: Path) -> int:
    """The bytes a folder holds; a file hard-linked from elsewhere (staging.link_staged) counts its
    share, size / links: removing one of its names frees nothing until the last goes."""
    total = 0
    for dirpath, _, files in os.walk(folder):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            total += st.st_size // max(st.st_nlink, 1)
    return total


def _last_use(folder: Path) -> float:
    for marker in (folder / RESULT_FILE, folder / CANDIDATE_FILE):
        if marker.is_file():
            return marker.stat().st_mtime
    return folder.stat().st_mtime


def work_folders(staging: Path) -> list[Path]:
    """Every unit gc may remove: a folder holding a result record or a candidate, and a folder of
    files with neither (unfinished work); the folders that only group them are not units."""
    units = []
    for dirpath, dirnames, filenames in os.walk(staging):
        here = Path(dirpath)
        if here == staging:
            continue
        if RESULT_FILE in filenames or CANDIDATE_FILE in filenames or (filenames and here.parent != staging):
            units.append(here)
            dirnames.clear()  # its sub-folders (tables/, internal/, exports/) go with it
    return sorted(units)


GX_STORES = ("uncommitted/validations", "uncommitted/data_docs/local_site/validations")


def validation_runs(quality: Path) -> list[Path]:
    """Every `<suite>/<run>` folder of GX's validation results and of their rendered pages."""
    gx = quality / "gx"
    return sorted(run for store in GX_STORES if (gx / store).is_dir()
                  for suite in (gx / store).iterdir() if suite.is_dir()
                  for run in suite.iterdir() if run.is_dir())


def _newest(folder: Path) -> float:
    return max((p.stat().st_mtime for p in folder.rglob("*") if p.is_file()), default=folder.stat().st_mtime)


def collect_garbage(layout: Layout, older_than_days: float, *, current_release: str | None = None,
                    dry_run: bool = False, now: float | None = None) -> GcReport:
    """Remove (or with `dry_run` only list) staged folders last used, and validation runs made,
    more than `older_than_days` ago."""
    cutoff = (time.time() if now is None else now) - older_than_days * DAY
    keep = layout.staging / "candidates" / current_release if current_release else None
    report = GcReport()
    units = [(f, _last_use(f)) for f in work_folders(layout.staging)] if layout.staging.is_dir() else []
    units += [(run, _newest(run)) for run in validation_runs(layout.root / "quality")
              if not (current_release and run.name.startswith(current_release))]
    for folder, last_use in units:
        if folder == keep or last_use >= cutoff:
            report.kept += 1
            continue
        size = _size(folder)
        if not dry_run:
            # Renamed away first, so a crash mid-delete never leaves a half-deleted folder that
            # still looks finished (its record gone with the rename).
            doomed = folder.with_name(f".gc-{folder.name}")
            os.replace(folder, doomed)
            shutil.rmtree(doomed)
        report.removed.append((folder, size))
    return report
