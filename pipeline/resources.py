"""The one resource assets use: where the data root is and which source to read."""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

import dagster as dg
from pydantic import create_model

from pipeline import env
from pipeline.stopping import stop_point
from pipeline.settings import DEFAULT_MAX_DISTANCE, DEFAULT_MAX_IMAGE_PIXELS, Layout, QualitySettings, Settings, ZipLimits


class _Resource(dg.ConfigurableResource):
    """Source selection and data root. Defaults come from the environment so the UI, the
    schedule and the CLI agree: REWARDHOUSE_SOURCE, REWARDHOUSE_LOCAL_PATH, REWARDHOUSE_HOME.
    The release-gate bounds are the fields of QualitySettings (see `quality_fields`)."""

    source: str = "sample"
    local_path: Optional[str] = None
    home: Optional[str] = None
    keep_releases: int = 0
    release_grace_minutes: float = 10.0  # pruning waits until CURRENT has been unchanged this long
    prm_label_threshold: float = 0.0
    dedupe_max_distance: int = DEFAULT_MAX_DISTANCE
    workers: int = 0
    # Image work on a Ray cluster: executor "ray" and the cluster's address (empty: a local Ray
    # instance); default from REWARDHOUSE_RAY_ADDRESS. "local": this machine's process pool.
    executor: str = "local"
    ray_address: Optional[str] = None
    # Decompression-bomb guard: images with more pixels are quarantined undecoded (Pillow's default).
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    export_keep_duplicates: bool = False
    export_keep_contaminated: bool = False
    # Leak classes the training export keeps (text, image, full); see Settings.export_keep_leaks.
    export_keep_leaks: List[str] = []
    # Text matching (pipeline/decontam/text.py); unset: the measured defaults.
    text_ngram: Optional[int] = None
    text_min_overlap: Optional[float] = None
    text_stock_records: Optional[int] = None
    text_sibling_margin: Optional[float] = None
    hf_image_revision: Optional[str] = None
    hf_visualprm_revision: Optional[str] = None
    hf_revisions: Dict[str, str] = {}  # any other Hub dataset: repo -> revision (e.g. MMInstruction/VL-RewardBench)
    hf_shards: Dict[str, int] = {}  # a Hub dataset too large to fetch whole: repo -> its first N shards
    # Publish even when a whole upstream file was refused (see Settings.allow_unusable_files).
    allow_unusable_files: bool = False
    # VisualPRM image roots, in order (folders, zips, split zips named by their first part).
    image_roots: List[str] = []
    # hf source: fetch the images path references need from OpenGVLab's archives by range (see Settings).
    hf_images: bool = False
    hf_images_budget_gb: float = 0.0
    # Reviewers' overrides of dedupe decisions (JSON); empty: overrides.json in the data root.
    overrides: Optional[str] = None

    def settings(self) -> Settings:
        stop_point()  # every asset starts by asking: a stop asked for ends the run here
        return Settings(
            source=self.source,
            local_path=self.local_path,
            zip_limits=ZipLimits(max_image_pixels=self.max_image_pixels),
            keep_releases=self.keep_releases,
            release_grace_minutes=self.release_grace_minutes,
            prm_label_threshold=self.prm_label_threshold,
            dedupe_max_distance=self.dedupe_max_distance,
            workers=self.workers,
            executor=self.executor,
            ray_address=self.ray_address or None,
            export_keep_duplicates=self.export_keep_duplicates,
            export_keep_contaminated=self.export_keep_contaminated,
            export_keep_leaks=tuple(self.export_keep_leaks),
            text_ngram=self.text_ngram,
            text_min_overlap=self.text_min_overlap,
            text_stock_records=self.text_stock_records,
            text_sibling_margin=self.text_sibling_margin,
            hf_image_revision=self.hf_image_revision,
            hf_visualprm_revision=self.hf_visualprm_revision,
            hf_revisions=dict(self.hf_revisions),
            hf_shards=dict(self.hf_shards),
            allow_unusable_files=self.allow_unusable_files,
            image_roots=tuple(self.image_roots),
            hf_images=self.hf_images,
            hf_images_budget_gb=self.hf_images_budget_gb,
            overrides=self.overrides or Layout(self.home or None).overrides,
            quality=self.quality(),
        )

    def quality(self) -> QualitySettings:
        values = {}
        for f in dataclasses.fields(QualitySettings):
            if isinstance(f.default, tuple):
                values[f.name] = (getattr(self, f"{f.name}_min"), getattr(self, f"{f.name}_max"))
            else:
                value = getattr(self, f.name)
                values[f.name] = value.upper() if f.name.endswith("_severity") else value
        return QualitySettings(**values)

    def layout(self) -> Layout:
        stop_point()
        return Layout(self.home or None)


def quality_fields() -> dict[str, tuple[type, object]]:
    """Resource fields for the release-gate bounds, from QualitySettings where they are declared
    once: each field by its name, a (low, high) pair as name_min / name_max."""
    out: dict[str, tuple[type, object]] = {}
    for f in dataclasses.fields(QualitySettings):
        if isinstance(f.default, tuple):
            low, high = f.default
            out[f"{f.name}_min"], out[f"{f.name}_max"] = (type(low), low), (type(high), high)
        else:
            out[f.name] = (type(f.default), f.default)
    return out


RewardhouseResource = create_model("RewardhouseResource", __base__=_Resource, __module__=__name__, **quality_fields())
RewardhouseResource.__doc__ = _Resource.__doc__


def default_resource() -> RewardhouseResource:
    return RewardhouseResource(
        source=env.source(),
        local_path=env.local_path(),
        home=env.home(),
        prm_label_threshold=env.prm_label_threshold(),
        dedupe_max_distance=env.dedupe_max_distance(DEFAULT_MAX_DISTANCE),
        workers=env.workers(),
        executor="ray" if env.ray_address() else "local",
        ray_address=env.ray_address(),
        max_image_pixels=env.max_image_pixels(DEFAULT_MAX_IMAGE_PIXELS),
        allow_unusable_files=env.allow_unusable_files(),
        image_roots=env.image_roots(),
        overrides=env.overrides(),
    )
