"""Where the image work runs: this machine's process pool, or a Ray cluster.

The hashing and inventory code asks an `Executor` to hash a zip's entries or a list of files; the
answers are the same whichever runs them (same functions, same chunks, results in item order),
so the choice never changes a release and is not part of its id. A zip may be a local path or an
object in a bucket (`s3://bucket/key`); on Ray each task opens the archive itself and reads only
its own entries, by range, and sends back hashes, never image bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.dedupe.hashing import HashedImage, Progress, default_workers, hash_files, hash_zip
from pipeline.settings import Settings, ZipLimits

KINDS = ("local", "ray")


@dataclass(frozen=True)
class Executor:
    kind: str = "local"  # local | ray
    address: str | None = None  # Ray: the cluster ("auto", "host:6379", "ray://host:10001"); None: a local Ray
    workers: int = 0  # local: processes (0: every core)
    chunk: int = 64  # images per task

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"executor must be one of {', '.join(KINDS)}, not {self.kind!r}")

    @classmethod
    def from_settings(cls, settings: Settings) -> Executor:
        """The executor a run's settings ask for (`executor`, `ray_address`, `workers`)."""
        return cls(settings.executor, settings.ray_address, settings.workers)

    @property
    def on_ray(self) -> bool:
        return self.kind == "ray"

    def describe(self) -> str:
        if self.on_ray:
            return f"Ray cluster at {self.address}" if self.address else "a local Ray instance"
        return f"{self.workers or default_workers()} local processes"

    def hash_zip(self, zip_path: Path | str, items: list[tuple[str, str]], limits: ZipLimits,
                 progress: Progress | None = None) -> list[HashedImage]:
        if self.on_ray:
            from pipeline.dedupe.ray_executor import hash_zip_ray

            return hash_zip_ray(zip_path, items, limits, address=self.address, chunk=self.chunk, progress=progress)
        return hash_zip(Path(zip_path), items, limits, workers=self.workers or default_workers(), progress=progress,
                        chunk=self.chunk)

    def hash_files(self, items: list[tuple[str, Path]], progress: Progress | None = None,
                   max_image_pixels: int | None = None) -> list[HashedImage]:
        if self.on_ray:
            from pipeline.dedupe.ray_executor import hash_files_ray

            return hash_files_ray(items, address=self.address, chunk=self.chunk, progress=progress,
                                  max_image_pixels=max_image_pixels)
        return hash_files(items, workers=self.workers or None, progress=progress, chunk=self.chunk,
                          max_image_pixels=max_image_pixels)
