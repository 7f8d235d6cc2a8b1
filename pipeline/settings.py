"""Where state lives and the knobs that change what a release contains.

Plain Python: no Dagster import, so the CLI, tests and assets share one source of truth.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline import env

# Bump when the meaning or shape of a published table changes: it is part of the release id.
TRANSFORM_VERSION = "10"


REPO_ROOT = Path(__file__).resolve().parent.parent

# Upstream pins. The annotation commit is the one the issue and ../shared/SOURCES.md name.
MMRB2_IMAGE_REPO = "facebook/MMRB2_image"
MMRB2_ANNOTATION_REPO = "facebookresearch/MMRB2"
MMRB2_ANNOTATION_COMMIT = "7ff0552cf298441af5ebbabea634b682ef04afee"
MMRB2_TASKS = ("t2i", "edit", "interleaved", "reasoning")
MMRB2_IMAGE_ZIP_NAMES = ("image.zip", "images.zip")


def is_remote(home: str | Path | None) -> bool:
    """An object-store data root (`s3://bucket/prefix`) rather than a folder."""
    return str(home or "").startswith("s3://")


def scratch_root(remote: str) -> Path:
    """The local working folder of an object-store data root: REWARDHOUSE_SCRATCH, else a folder
    under the system temp named after the bucket and prefix (so two roots never share one)."""
    configured = env.scratch()
    if configured:
        return Path(configured).expanduser().resolve()
    import tempfile

    name = remote[len("s3://"):].strip("/").replace("/", "_")
    return (Path(tempfile.gettempdir()) / "rewardhouse-scratch" / name).resolve()


def data_root() -> Path:
    """The local data root: `REWARDHOUSE_HOME`, else `data/` at the repository root; for an
    object-store home, its scratch folder. Always absolute."""
    configured = env.home()
    if is_remote(configured):
        return scratch_root(configured)
    root = Path(configured).expanduser() if configured else REPO_ROOT / "data"
    return root.resolve()


DEFAULT_MAX_DISTANCE = 8
# How a train record copies an eval record (pipeline/decontam/records.py): by its text, a picture, or both.
LEAK_CLASSES = ("text", "image", "full")
# Text matching's defaults (pipeline/decontam/text.py's TextMatchSettings, where each is explained;
# chosen on the tuning half of tests/benchmarks/bench_text_leaks.py). Here so that the release id
# takes the values in force without importing the matcher.
TEXT_MATCH_DEFAULTS = {"ngram": 12, "min_overlap": 0.9, "stock_records": 25, "sibling_margin": 0.02}
# The largest near-duplicate radius: beyond half the bits nothing is a near duplicate, and the
# candidate search would be quadratic.
MAX_DEDUPE_DISTANCE = 32
# Pillow's own default for Image.MAX_IMAGE_PIXELS (1 GiB of 24-bit pixels / 4 / 3).
DEFAULT_MAX_IMAGE_PIXELS = 89_478_485


@dataclass(frozen=True)
class ZipLimits:
    """Bounds that make an input 'absurd': a zip, an entry in it, or an image (wherever it comes
    from). Real MMRB2 JPEGs are well under 20 MB and barely compress."""

    max_entry_bytes: int = 64 * 1024 * 1024
    max_total_bytes: int = 64 * 1024 * 1024 * 1024
    max_entry_ratio: float = 200.0  # uncompressed / compressed, for entries above ratio_floor_bytes
    ratio_floor_bytes: int = 1024 * 1024
    max_entries: int = 1_000_000
    # Decompression-bomb guard: an image with more pixels is refused before it is decoded.
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS

    def __post_init__(self) -> None:
        pixels = self.max_image_pixels
        if isinstance(pixels, bool) or not isinstance(pixels, int) or pixels < 1:
            raise ValueError(f"max_image_pixels must be a positive integer, not {pixels!r}")


@dataclass(frozen=True)
class QualitySettings:
    """Bounds the release gate checks against, declared here once: each is a field of the
    `rewardhouse` resource of the same name (a (low, high) pair as name_min / name_max), so the
    launchpad and `--set` reach it. The label defaults follow the upstream facts (about 10%
    negative steps, 1..16 steps per sample); see docs/quality.md."""

    max_steps: int = 16
    ratings: tuple[int, int] = (1, 6)  # MMRB2 human ratings of t2i/edit/interleaved pairs
    positive_rate: tuple[float, float] = (0.75, 0.97)  # overall share of "+" steps
    source_positive_rate: tuple[float, float] = (0.5, 1.0)  # per source with enough samples
    min_source_samples: int = 20
    # A preference set's records by their own source (RLAIF-V's ds_name): none may hold more than
    # this share (a shard of one source only is a broken download, not the set).
    max_source_share: float = 0.95
    drift_psi: float = 0.25  # population stability index above this is drift
    drift_row_change: float = 0.5  # |rows - previous| / previous above this is drift
    drift_severity: str = "WARN"
    max_cluster_size: int = 100
    quarantine_budget: float = 0.05  # share of a dataset's records (and of its images) quarantined
    budget_severity: str = "WARN"

    def __post_init__(self) -> None:
        for name in ("drift_severity", "budget_severity"):
            if getattr(self, name) not in ("WARN", "ERROR"):
                raise ValueError(f"{name} must be WARN or ERROR, not {getattr(self, name)!r}")


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Settings:
    source: str = "sample"  # sample | local | hf
    local_path: str | None = None
    zip_limits: ZipLimits = field(default_factory=ZipLimits)
    keep_releases: int = 0  # 0 keeps every release queryable
    # Pruning waits until CURRENT has not changed for this long: a reader that read CURRENT just
    # before a publish may still be reading the release it named (docs/releases.md).
    release_grace_minutes: float = 10.0
    # VisualPRM raw form: a step is "+" iff its Monte-Carlo score is above this (upstream: 0.0).
    prm_label_threshold: float = 0.0
    # Near-duplicate radius in pHash bits (64-bit hashes); see docs/dedupe.md for the measurements.
    dedupe_max_distance: int = DEFAULT_MAX_DISTANCE
    workers: int = 0  # processes for hashing; 0 = every core
    # Where the image work runs: "local" (the process pool) or "ray" (the cluster at ray_address,
    # or a local Ray instance when None). Same results either way, so not part of the release id.
    executor: str = "local"
    ray_address: str | None = None
    export_keep_duplicates: bool = False
    export_keep_contaminated: bool = False  # keep every leak class (below) in the training export
    # Leak classes (pipeline/decontam/records.py: text | image | full) the training export keeps;
    # every other class is left out. Eval-to-eval overlap is reported, never removed.
    export_keep_leaks: tuple[str, ...] = ()
    # Text matching (pipeline/decontam/text.py); None: the module's measured default.
    text_ngram: int | None = None
    text_min_overlap: float | None = None
    text_stock_records: int | None = None
    text_sibling_margin: float | None = None
    quality: QualitySettings = field(default_factory=QualitySettings)
    # hf source: move to these Hub commits (the upstream sensor sets them); None keeps the lock.
    hf_image_revision: str | None = None
    hf_visualprm_revision: str | None = None
    # Any other Hub dataset: repo -> revision (the sensor pins a run through it). Datasets added
    # later pin here, so adding one needs no new setting.
    hf_revisions: dict = field(default_factory=dict)
    # hf source: repo -> take only its first N data shards (by name), for sets too large to fetch
    # whole (RLAIF-V is ~13 GB in 14 shards); a repo not named here is fetched whole.
    hf_shards: dict = field(default_factory=dict)
    # Publish even when a whole upstream file was refused (the `upstream_files` check then warns):
    # e.g. ship three MMRB2 tasks while the fourth's file is broken. Off: such a file blocks.
    allow_unusable_files: bool = False
    # Where VisualPRM's path references resolve, in order, after the dataset's own folder: folders,
    # zips, split zips named by their first part (images.zip_aa).
    image_roots: tuple[str, ...] = ()
    # hf source: resolve the references no root answers from OpenGVLab's archives on the Hub, by
    # range (off by default: the full archives are 70 GB), fetching at most this many GB a run (0: no bound).
    hf_images: bool = False
    hf_images_budget_gb: float = 0.0
    # Reviewers' overrides of dedupe decisions (pipeline/review/overrides.py): a JSON file, by
    # default `overrides.json` in the data root. Read once per run, by the dedupe step that applies
    # them; the digest of what it applied reaches the release id through its output, not through
    # `fingerprint` (a second read could see a file changed in between).
    overrides: str | None = None

    def __post_init__(self) -> None:
        # Refused when the settings are made (the CLI makes them before it starts a run), not by
        # the asset that first uses them, minutes into the run.
        d = self.dedupe_max_distance
        if not _whole(d) or not 0 <= d <= MAX_DEDUPE_DISTANCE:
            raise ValueError(f"dedupe_max_distance (--max-distance) must be within 0..{MAX_DEDUPE_DISTANCE}, not {d!r}")
        if not _whole(self.workers) or self.workers < 0:
            raise ValueError(f"workers (--workers) must be 0 (every core) or more, not {self.workers!r}")
        if not _whole(self.keep_releases) or self.keep_releases < 0:
            raise ValueError(f"keep_releases must be 0 (keep all) or more, not {self.keep_releases!r}")
        if isinstance(self.release_grace_minutes, bool) or not isinstance(self.release_grace_minutes, (int, float)) \
                or not 0 <= self.release_grace_minutes < float("inf"):
            raise ValueError(f"release_grace_minutes must be 0 or more, not {self.release_grace_minutes!r}")
        for repo, n in dict(self.hf_shards).items():
            if not _whole(n) or n < 1:
                raise ValueError(f"hf_shards[{repo!r}] must be a whole number of shards, 1 or more, not {n!r}")
        unknown = [c for c in self.export_keep_leaks if c not in LEAK_CLASSES]
        if unknown or isinstance(self.export_keep_leaks, str):
            raise ValueError(f"export_keep_leaks (--keep-leaks) takes leak classes among {', '.join(LEAK_CLASSES)}, "
                             f"not {', '.join(map(repr, unknown or [self.export_keep_leaks]))}")
        for name, low, high, whole in (("text_ngram", 1, 64, True), ("text_min_overlap", 0.0, 1.0, False),
                                       ("text_stock_records", 2, None, True), ("text_sibling_margin", 0.0, 1.0, False)):
            value = getattr(self, name)
            if value is None:
                continue
            if (whole and not _whole(value)) or (not whole and (isinstance(value, bool) or not isinstance(value, (int, float)))) \
                    or value < low or (high is not None and value > high):
                bound = f"{low}..{high}" if high is not None else f"{low} or more"
                raise ValueError(f"{name} must be {'a whole number' if whole else 'a number'} within {bound}, not {value!r}")

    @property
    def kept_leaks(self) -> tuple[str, ...]:
        """The leak classes the training export keeps."""
        return LEAK_CLASSES if self.export_keep_contaminated else tuple(self.export_keep_leaks)

    def hf_revision(self, repo: str) -> str | None:
        return self.hf_revisions.get(repo)

    def hf_shard_limit(self, repo: str) -> int | None:
        """How many of a Hub repo's shards the hf source takes (None: all)."""
        return self.hf_shards.get(repo)

    @property
    def max_image_pixels(self) -> int:
        return self.zip_limits.max_image_pixels

    def image_roots_signature(self) -> list[dict]:
        return [root_signature(r) for r in self.image_roots]

    def fingerprint(self) -> dict:
        """Settings that change table content, and so belong in the release id (not `workers`);
        `zip_limits` includes `max_image_pixels`. Plain values only, no file is read: what a step
        reads from a file (the reviewers' decisions) comes with its output (`Staged.fingerprint`)."""
        return {
            "zip_limits": asdict(self.zip_limits),
            "prm_label_threshold": self.prm_label_threshold,
            "dedupe_max_distance": self.dedupe_max_distance,
            "export_keep_duplicates": self.export_keep_duplicates,
            "export_keep_contaminated": self.export_keep_contaminated,
            "export_keep_leaks": sorted(self.export_keep_leaks),
            "text_match": {k: v if getattr(self, f"text_{k}") is None else getattr(self, f"text_{k}")
                           for k, v in TEXT_MATCH_DEFAULTS.items()},
            "quality": asdict(self.quality),
            # The roots by name; what they hold (`image_roots_signature`) is read once, by the step
            # that reads them, and reaches the release id through its output.
            "image_roots": [str(r) for r in self.image_roots],
            "hf_images": self.hf_images,
        }


def root_signature(root: str) -> dict:
    """An image root as the release id sees it: its path, and for an archive its parts' sizes and
    times (a folder's files are checksummed as they are read, into prm_images)."""
    if str(root).startswith("s3://"):
        return {"path": str(root)}
    path = Path(root).expanduser()
    out = {"path": str(path)}
    if path.is_file():
        from pipeline.archives import ArchiveError, split_parts

        try:
            out["parts"] = [(p.name, p.stat().st_size, int(p.stat().st_mtime)) for p in split_parts(path)]
        except ArchiveError as exc:
            out["error"] = str(exc)
    return out


class Layout:
    """Every path under the data root, in one place. With an object-store home (`s3://…`) the
    paths are those of its local scratch folder, and `remote` is the bucket root that releases,
    staged work and quality results are kept in."""

    def __init__(self, root: Path | str | None = None):
        home = root if root is not None else env.home()
        self.remote: str | None = str(home).rstrip("/") if is_remote(home) else None
        if self.remote:
            self.root = scratch_root(self.remote)
        else:
            self.root = (Path(root).expanduser() if root is not None else data_root()).resolve()

    @property
    def where(self) -> str:
        """The data root as users name it: the bucket root, or the folder."""
        return self.remote or str(self.root)

    @property
    def raw(self) -> Path:
        return self.root / "raw"

    def raw_source(self, source: str) -> Path:
        return self.raw / source

    @property
    def staging(self) -> Path:
        return self.root / "staging"

    @property
    def releases(self) -> Path:
        return self.root / "releases"

    @property
    def warehouse(self) -> Path:
        return self.root / "warehouse.duckdb"

    @property
    def image_store(self) -> Path:
        """Content-addressed image files (sha256-named), shared by every release that links them."""
        return self.root / "images"

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster"

    @property
    def overrides(self) -> str:
        """The default reviewers' overrides file (in the bucket for a bucket root)."""
        return f"{self.remote}/overrides.json" if self.remote else str(self.root / "overrides.json")


# VisualPRM400K (process-supervision training data): the parquet release on the Hub, and the
# InternVL upstream (jsonl annotations + image zips) that a local mirror may hold instead.
VISUALPRM_REPO = "mm-eval/VisualPRM400K"
VISUALPRM_UPSTREAM_REPO = "OpenGVLab/VisualPRM400K"


def quiet_duckdb(con):
    """A DuckDB connection without its progress bar, which DuckDB draws on standard output (a
    terminal or not) for a query over 2 s: it would land inside `rewardhouse dedupe`'s CSV or
    `rewardhouse sql`'s rows. A setting of the connection (DuckDB refuses it in `config`)."""
    con.execute("set enable_progress_bar = false")
    return con
