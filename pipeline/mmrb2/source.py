"""MMRB2's raw files, from any source, in the upstream layout (pipeline/mmrb2/layout.py).

`fetch_mmrb2` takes them from the configured source: the generated sample, a local mirror (absent
when it holds no MMRB2 file; an error when it holds only some), or upstream (`fetch_mmrb2_hf`):

- the images: the Hugging Face dataset `facebook/MMRB2_image` (one zip, `image.zip` or
  `images.zip`), at a pinned revision;
- the annotations: `facebookresearch/MMRB2` on GitHub at `MMRB2_ANNOTATION_COMMIT`, from the
  raw-file host.

Both go through the `hf` source's pinned, verified, resumable downloads (pipeline/sources/hf.py).
"""

from __future__ import annotations

from pathlib import Path

from pipeline import env
from pipeline.mmrb2.layout import ANNOTATION_DIR, NEW_TASK_FILE, mmrb2_present, snapshot_from_layout
from pipeline.settings import (
    MMRB2_ANNOTATION_COMMIT, MMRB2_ANNOTATION_REPO, MMRB2_IMAGE_REPO, MMRB2_IMAGE_ZIP_NAMES, MMRB2_TASKS, Layout,
    Settings,
)
from pipeline.sources import Log, check_source, checksum_cache, local_path
from pipeline.sources.base import ChecksumCache, RawSnapshot
from pipeline.sources.hf import GitHubFiles, HubFiles, fetch_github_files, fetch_hub_files

# The image zip's commit. None means "lock on first fetch": the first fetch resolves `main` to its
# commit sha and records it in sources.lock.json; later fetches reuse it.
MMRB2_IMAGE_REVISION: str | None = None


def _record_zip(entry: dict, records: dict) -> None:
    ((entry["file"], entry["zip"]),) = records.items()


IMAGE_FILES = HubFiles(
    repo=MMRB2_IMAGE_REPO,
    wanted=" or ".join(MMRB2_IMAGE_ZIP_NAMES),
    knob="hf_image_revision / MMRB2_IMAGE_REVISION",
    select=lambda files: [n for n in MMRB2_IMAGE_ZIP_NAMES if n in files][:1],
    local_globs=MMRB2_IMAGE_ZIP_NAMES,
    recorded=lambda e: {e["file"]: e.get("zip")} if e.get("file") in MMRB2_IMAGE_ZIP_NAMES else None,
    record=_record_zip,
)

# The task files (required) and new_task_release.json (optional).
ANNOTATION_FILES = GitHubFiles(
    repo=MMRB2_ANNOTATION_REPO,
    commit=MMRB2_ANNOTATION_COMMIT,
    folder=ANNOTATION_DIR.name,
    knob="MMRB2_ANNOTATION_COMMIT",
    files=(*((f"annotations:{t}", f"{t}_response_only.json", True) for t in MMRB2_TASKS),
           ("new_task_release", NEW_TASK_FILE, False)),
)


def fetch_local(path: Path, cache: ChecksumCache) -> RawSnapshot | None:
    """The MMRB2 files under `path`, or None when the folder holds none of them."""
    if not mmrb2_present(path):
        return None
    return snapshot_from_layout(path, "local", cache, revisions={"local": str(path.resolve())})


def fetch_mmrb2_hf(
    raw_root: Path,
    cache: ChecksumCache,
    *,
    hf_endpoint: str | None = None,
    github_raw_base: str = "https://raw.githubusercontent.com",
    image_revision: str | None = None,
    token: str | None = None,
    log: Log = lambda s: None,
) -> RawSnapshot:
    """Download (or reuse) the MMRB2 image zip and annotation files under `raw_root`.

    `hf_endpoint` defaults to `HF_ENDPOINT`, then huggingface.co; `token` defaults to `HF_TOKEN`
    (as huggingface_hub reads it). Raises SourceError with what failed and what to do.
    """
    image_sha, (zip_name,) = fetch_hub_files(raw_root, cache, IMAGE_FILES, revision=image_revision or MMRB2_IMAGE_REVISION,
                                             hf_endpoint=hf_endpoint, token=token, log=log)
    annotation_origins = fetch_github_files(raw_root, cache, ANNOTATION_FILES, base=github_raw_base, log=log)

    origins = {"image_zip": f"{MMRB2_IMAGE_REPO}@{image_sha}/{zip_name}", **annotation_origins}
    return snapshot_from_layout(
        Path(raw_root),
        "hf",
        cache,
        origins=origins,
        revisions={MMRB2_IMAGE_REPO: image_sha, MMRB2_ANNOTATION_REPO: MMRB2_ANNOTATION_COMMIT},
    )


def fetch_mmrb2(settings: Settings, layout: Layout, log: Log = lambda s: None) -> RawSnapshot | None:
    """MMRB2's raw files (image zip + annotation JSONs)."""
    check_source(settings.source)
    cache = checksum_cache(layout)
    if settings.source == "sample":
        from pipeline.mmrb2.sample import fetch_sample

        return fetch_sample(layout.raw_source("sample"), cache)
    if settings.source == "local":
        return fetch_local(local_path(settings), cache)
    # HF_ENDPOINT / HF_TOKEN as huggingface_hub reads them; the raw-file host can be redirected
    # too (a mirror, or a loopback server in tests).
    base = env.github_raw("https://raw.githubusercontent.com")
    return fetch_mmrb2_hf(layout.raw_source("hf"), cache, github_raw_base=base, image_revision=settings.hf_image_revision,
                          log=log)
