"""What upstream looks like right now: the head revision of every dataset the `hf` source reads.

Plain Python (no Dagster), so the change sensor, the CLI and tests share it. Per poll it costs one
repo-info call per Hub dataset, one HEAD per data file the source would download (the image zip,
the parquet shards) and one GitHub API call:

    {"facebook/MMRB2_image":   {"kind": "hf", "revision": "<commit sha of main>",
                                "files": {"image.zip": "<etag>"}},
     "mm-eval/VisualPRM400K":  {"kind": "hf", "revision": "<sha>", "files": {"data/train-...parquet": "<etag>"}},
     "MMInstruction/VL-RewardBench": {"kind": "hf", "revision": "<sha>", "files": {"data/test-...parquet": "<etag>"}},
     "facebookresearch/MMRB2": {"kind": "github", "revision": "<commit sha of the default branch>"}}

The upstreams are those the datasets of the registry (pipeline/datasets.py) declare.

An upstream that cannot be read is `{"error": "<what failed>"}` instead; this never raises, so a
caller can report the failure and try again later.

A Hub ETag is the file's sha256 for LFS files (zips, parquet), the same value the `hf` source
verifies downloads against, so `content_digest` changes when a file the pipeline reads changes,
not when someone edits a README.
"""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request

from pipeline import datasets, env

DEFAULT_GITHUB_API = "https://api.github.com"

# Every upstream of every dataset in the registry: Hub dataset -> which of its files the hf source
# downloads (the same selection its fetch uses), and the GitHub repos.
HUB_DATASETS = {u.repo: u.select for d in datasets.DATASETS for u in d.upstream if u.kind == "hf"}
GITHUB_REPOS = tuple(u.repo for d in datasets.DATASETS for u in d.upstream if u.kind == "github")
# Upstream repo -> the resource field that pins a run to a revision of it.
PIN_FIELDS = {u.repo: u.pin_setting for d in datasets.DATASETS for u in d.upstream if u.pin_setting}


def upstream_revisions(
    *,
    hf_endpoint: str | None = None,
    github_api_base: str | None = None,
    token: str | None = None,
    github_token: str | None = None,
    timeout: float = 10,
) -> dict:
    """The current head of each upstream (see the module docstring for the shape).

    `hf_endpoint` defaults to `HF_ENDPOINT`, then huggingface.co; `token` to what huggingface_hub
    finds (`HF_TOKEN`). `github_api_base` defaults to `REWARDHOUSE_GITHUB_API`, then
    api.github.com; `github_token` to `GITHUB_TOKEN` (optional: one call an hour is far below the
    anonymous rate limit).
    """
    endpoint = (hf_endpoint or env.hf_endpoint() or "").rstrip("/") or None
    api_base = (github_api_base or env.github_api(DEFAULT_GITHUB_API)).rstrip("/")
    github_token = github_token or env.github_token()

    heads: dict[str, dict] = {}
    for repo, select in HUB_DATASETS.items():
        try:
            heads[repo] = _hub_head(repo, select, endpoint=endpoint, token=token, timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - a failure is reported, never raised
            heads[repo] = {"error": _describe(f"Hub dataset {repo} at {endpoint or 'huggingface.co'}", exc)}
    for repo in GITHUB_REPOS:
        try:
            heads[repo] = {"kind": "github", "revision": _github_head(repo, api_base, github_token, timeout)}
        except Exception as exc:  # noqa: BLE001
            heads[repo] = {"error": _describe(f"GitHub repo {repo} at {api_base}", exc)}
    return heads


def errors(heads: dict) -> dict[str, str]:
    """Upstream -> error message, for the entries that could not be read."""
    return {repo: head["error"] for repo, head in heads.items() if "error" in head}


def content_digest(heads: dict) -> str:
    """A digest of what the pipeline would read: the data files' ETags for Hub datasets (their
    commit when no file is listed), the commit for GitHub. A Hub commit that leaves those files
    alone does not change it."""
    content = {
        repo: head.get("files") or head.get("revision")
        for repo, head in sorted(heads.items())
    }
    return _digest(content)


def revisions_digest(heads: dict) -> str:
    """A digest of every commit and ETag: distinct for every upstream state (a revert on the Hub
    is a new commit)."""
    return _digest(heads)


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _hub_head(repo: str, select, *, endpoint: str | None, token: str | None, timeout: float) -> dict:
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url

    info = HfApi(endpoint=endpoint, token=token).repo_info(repo, repo_type="dataset", revision="main", timeout=timeout)
    if not info.sha:
        raise ValueError("the Hub returned no commit sha for main")
    listed = [s.rfilename for s in info.siblings or []]
    files = {}
    for name in select(listed):
        # Ask at the commit just resolved, so the ETags belong to that revision even if main moves meanwhile.
        url = hf_hub_url(repo, name, repo_type="dataset", revision=info.sha, endpoint=endpoint)
        meta = get_hf_file_metadata(url, token=token, timeout=timeout, endpoint=endpoint)
        files[name] = (meta.etag or "").strip('"')
    return {"kind": "hf", "revision": info.sha, "files": files}


def _github_head(repo: str, api_base: str, token: str | None, timeout: float) -> str:
    """`GET /repos/{repo}/commits/HEAD` with the sha media type: the bare commit sha of the default branch."""
    headers = {"Accept": "application/vnd.github.sha", "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "rewardhouse"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"{api_base}/repos/{repo}/commits/HEAD", headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        sha = response.read(200).decode("ascii", "replace").strip()
    if len(sha) != 40 or any(c not in "0123456789abcdef" for c in sha):
        raise ValueError(f"expected a commit sha, got {sha[:60]!r}")
    return sha


def _describe(what: str, exc: Exception) -> str:
    detail = " ".join(str(exc).split())[:300] or "no detail"
    if isinstance(exc, urllib.error.HTTPError):
        detail = f"HTTP {exc.code} {exc.reason}"
    return f"could not read {what}: {type(exc).__name__}: {detail}"
