"""GX Data Docs that render offline: the pages' CDN assets served from the site itself.

GX 1.x writes its Data Docs with `<script>`/`<link>` tags to public CDNs (bootstrap, jQuery,
bootstrap-table, popper, font-awesome, bootstrap-datepicker, vega) and a logo image from its own
bucket. Without a network those pages are unstyled and their result lists empty. Here:

- `python -m checks.web_assets fetch` (run by `make bootstrap`, so by `make run` and `make
  test`) downloads each package's tarball from the npm registry at the exact version the
  templates name (pinned with its sha512 in `web_assets.lock.json`), checks the digest and keeps
  only the files the pages use, under `.web-assets/` in the repository (REWARDHOUSE_WEB_ASSETS).
- `vendor_site(site)` (called after every Data Docs build) copies them into the site as
  `static/vendor/<package>@<version>/<path in the package>` and rewrites the links of the pages
  just built to relative paths; the GX logo points at the copy the site already has.
- `python -m checks.web_assets lock` re-resolves the versions (vega@5 etc.) and rewrites the lock.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import os
import re
import shutil
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

from pipeline.settings import REPO_ROOT

log = logging.getLogger(__name__)

REGISTRY = "https://registry.npmjs.org"
LOCK = Path(__file__).with_name("web_assets.lock.json")
VENDOR = "static/vendor"
DONE = ".complete"  # in a site's vendor folder once every page of the site was rewritten

# CDN URL as GX's templates write it -> (npm package, version or range, file in the package).
ASSETS: dict[str, tuple[str, str, str]] = {
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": ("bootstrap", "4.3.1", "dist/css/bootstrap.min.css"),
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": ("bootstrap", "4.3.1", "dist/js/bootstrap.min.js"),
    "https://code.jquery.com/jquery-3.7.1.min.js": ("jquery", "3.7.1", "dist/jquery.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": ("popper.js", "1.12.9", "dist/umd/popper.min.js"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": ("bootstrap-table", "1.19.1", "dist/bootstrap-table.min.css"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": ("bootstrap-table", "1.19.1", "dist/bootstrap-table.min.js"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js":
        ("bootstrap-table", "1.19.1", "dist/extensions/filter-control/bootstrap-table-filter-control.min.js"),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css":
        ("bootstrap-table", "1.19.0", "dist/extensions/filter-control/bootstrap-table-filter-control.css"),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css":
        ("bootstrap-table", "1.19.0", "dist/extensions/filter-control/bootstrap-table-filter-control.min.css"),
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css": ("@fortawesome/fontawesome-free", "6.6.0", "css/all.min.css"),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css":
        ("bootstrap-datepicker", "1.9.0", "dist/css/bootstrap-datepicker.min.css"),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js":
        ("bootstrap-datepicker", "1.9.0", "dist/js/bootstrap-datepicker.min.js"),
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css":
        ("@forevolve/bootstrap-dark", "1.1.0", "dist/css/bootstrap-prefers-dark.css"),
    "https://cdn.jsdelivr.net/npm/vega@5": ("vega", "5", "build/vega.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-lite@5": ("vega-lite", "5", "build/vega-lite.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-embed@6": ("vega-embed", "6", "build/vega-embed.min.js"),
}
# Folders a stylesheet loads from (relative to it): font-awesome's fonts.
FOLDERS: dict[str, str] = {"@fortawesome/fontawesome-free": "webfonts/"}
# GX's logo, fetched from its bucket with a timestamp and the context id: the site has a copy.
LOGO = re.compile(r"https://great-expectations-web-assets\.s3\.[a-z0-9-]+\.amazonaws\.com/[A-Za-z_-]+\.png(\?[^\"')\s]*)?")
LOGO_LOCAL = "static/images/logo-long.png"


# A page opened from disk has an opaque origin: a `crossorigin` load of a file fails, and so does
# the integrity check of the CDN's copy. The vendored files were checked against the npm
# registry's sha512 when fetched, so those attributes go from the rewritten tags.
_VENDOR_TAG = re.compile(r"<(?:script|link)\b[^>]*static/vendor/[^>]*>")
_CHECKS = re.compile(r"\s(?:integrity|crossorigin)=\"[^\"]*\"")


def cache_dir() -> Path:
    return Path(os.environ.get("REWARDHOUSE_WEB_ASSETS") or REPO_ROOT / ".web-assets")


def _wanted() -> dict[tuple[str, str], set[str]]:
    """(package, version as named) -> files and folders to keep."""
    out: dict[tuple[str, str], set[str]] = {}
    for pkg, ver, path in ASSETS.values():
        out.setdefault((pkg, ver), set()).add(path)
        if pkg in FOLDERS:
            out[(pkg, ver)].add(FOLDERS[pkg])
    return out


def _get(url: str, timeout: float = 60.0) -> bytes:
    req = urllib.request.Request(url, headers={"User-Agent": "rewardhouse-web-assets"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.read()


def _key(pkg: str, ver: str) -> str:
    return f"{pkg}@{ver}"


def lock() -> dict:
    """Resolve every package's version (a bare major takes its newest release) from the registry."""
    entries = {}
    for pkg, ver in sorted(_wanted()):
        meta = json.loads(_get(f"{REGISTRY}/{pkg.replace('/', '%2F')}"))
        if ver in meta["versions"]:
            exact = ver
        else:
            same = [v for v in meta["versions"] if v.split(".")[0] == ver and "-" not in v]
            exact = max(same, key=lambda v: tuple(int(x) for x in v.split(".")))
        dist = meta["versions"][exact]["dist"]
        entries[_key(pkg, ver)] = {"package": pkg, "version": exact, "tarball": dist["tarball"],
                                   "integrity": dist["integrity"]}
    LOCK.write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n")
    return entries


def _locked() -> dict:
    return json.loads(LOCK.read_text())


def _folder(entry: dict) -> Path:
    return cache_dir() / _key(entry["package"], entry["version"])


def fetch(quiet: bool = False) -> list[str]:
    """Download what is missing from the cache; returns the packages fetched."""
    got, locked = [], _locked()
    for (pkg, ver), keep in sorted(_wanted().items()):
        entry = locked[_key(pkg, ver)]
        folder = _folder(entry)
        if (folder / DONE).is_file():
            continue
        data = _get(entry["tarball"])
        algo, _, want = entry["integrity"].partition("-")
        if base64.b64encode(hashlib.new(algo, data).digest()).decode() != want:
            raise RuntimeError(f"{entry['tarball']}: {algo} does not match the lock; not used")
        tmp = folder.with_name(f".{folder.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar.getmembers():
                rel = member.name.split("/", 1)[1] if "/" in member.name else ""  # npm tarballs: package/<path>
                if not member.isfile() or ".." in Path(rel).parts or not any(
                        rel == k or (k.endswith("/") and rel.startswith(k)) for k in keep):
                    continue
                target = tmp / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(member).read())
        missing = [k for k in keep if not (tmp / k).exists()]
        if missing:
            raise RuntimeError(f"{entry['tarball']}: has no {', '.join(missing)}")
        (tmp / DONE).write_text(entry["integrity"] + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        folder.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, folder)
        got.append(_key(entry["package"], entry["version"]))
        if not quiet:
            print(f"web assets: {got[-1]} ({len(data) // 1024} KB tarball)", file=sys.stderr)
    return got


def _rewrite(page: Path, site: Path, targets: dict[str, str]) -> bool:
    text = page.read_text(encoding="utf-8", errors="surrogateescape")
    new = text
    up = os.path.relpath(site, page.parent).replace(os.sep, "/")
    prefix = "" if up == "." else up + "/"
    for url, rel in targets.items():
        if url in new:
            new = new.replace(url, prefix + rel)
    new = LOGO.sub(prefix + LOGO_LOCAL, new)
    new = _VENDOR_TAG.sub(lambda m: _CHECKS.sub("", m.group(0)), new)
    if new != text:
        page.write_text(new, encoding="utf-8", errors="surrogateescape")
        return True
    return False


def vendor_site(site: Path, since: float | None = None) -> int | None:
    """Serve a Data Docs site's CDN assets from the site (module docstring). Pages changed at or
    after `since` are rewritten (every page the first time). Returns the pages rewritten, or None
    (with a warning) when the assets were never fetched."""
    locked = _locked()
    if not all((_folder(e) / DONE).is_file() for e in locked.values()):
        log.warning("GX Data Docs keep their CDN links: the web assets are not in %s (run `make bootstrap`, "
                    "which fetches them from the npm registry)", cache_dir())
        return None
    vendor = site / VENDOR
    targets = {}
    for url, (pkg, ver, path) in ASSETS.items():
        entry = locked[_key(pkg, ver)]
        rel = f"{VENDOR}/{_key(entry['package'], entry['version'])}"
        src = _folder(entry)
        dst = site / rel
        if not (dst / DONE).is_file():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        targets[url] = f"{rel}/{path}"
    first = not (vendor / DONE).is_file()
    changed = 0
    for page in site.rglob("*"):
        if page.suffix not in (".html", ".css") or VENDOR in page.relative_to(site).as_posix():
            continue
        if first or since is None or page.stat().st_mtime >= since - 1:
            changed += _rewrite(page, site, targets)
    (vendor / DONE).write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + "\n")
    return changed


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "fetch"
    if command == "lock":
        for key, e in lock().items():
            print(f"{key}: {e['version']}")
    elif command == "fetch":
        try:
            fetch()
        except Exception as exc:  # no registry: Data Docs keep their CDN links, said once here
            print(f"web assets: not fetched ({type(exc).__name__}: {exc}); GX Data Docs will need a network",
                  file=sys.stderr)
    else:
        sys.exit("usage: python -m checks.web_assets [fetch|lock]")
