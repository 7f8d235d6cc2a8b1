"""The release asset: gather staged tables, publish an immutable release, refresh the warehouse."""


from pathlib import Path
from typing import Optional

import dagster as dg
import pyarrow as pa

from pipeline.quarantine import QUARANTINE_SCHEMA
from pipeline.resources import RewardhouseResource
from pipeline.settings import TRANSFORM_VERSION
from pipeline.visualprm.export import render_meta
from pipeline.staging import read_staged
from warehouse.duck import sync_warehouse
from warehouse.store import ReleaseStore, release_id_for

from assets.common import snapshot_of

GROUP = "release"


def collect_tables(staged: list[dict]) -> dict[str, pa.Table]:
    """Merge staged outputs; `quarantine` rows from every stage are concatenated into one table."""
    tables: dict[str, pa.Table] = {}
    quarantine = [pa.table({f.name: [] for f in QUARANTINE_SCHEMA}, schema=QUARANTINE_SCHEMA)]
    for item in staged:
        for name, table in read_staged(item["tables"]).items():
            if name == "quarantine":
                quarantine.append(table.cast(QUARANTINE_SCHEMA))
            elif name in tables:
                raise ValueError(f"table {name} is staged twice")
            else:
                tables[name] = table
    tables["quarantine"] = pa.concat_tables(quarantine)
    return tables


@dg.asset(group_name=GROUP, kinds={"duckdb", "parquet"}, code_version="1")
def warehouse_release(
    context: dg.AssetExecutionContext,
    rewardhouse: RewardhouseResource,
    mmrb2_raw: Optional[dict],
    mmrb2_annotations: dict,
    mmrb2_images: dict,
    visualprm_raw: Optional[dict],
    visualprm_samples: dict,
    visualprm_images: dict,
    visualprm_export: dict,
    image_hashes: dict,
    image_dedupe: dict,
) -> dg.MaterializeResult:
    """Publish the staged tables and exports as a content-addressed release and point the
    warehouse at it."""
    layout, settings = rewardhouse.layout(), rewardhouse.settings()
    raws = {"mmrb2": snapshot_of(mmrb2_raw), "visualprm": snapshot_of(visualprm_raw)}
    tables = collect_tables(
        [mmrb2_annotations, mmrb2_images, visualprm_samples, visualprm_images, visualprm_export, image_hashes, image_dedupe]
    )
    sources = {
        name: {"source": s.source, "revisions": s.revisions, "files": s.checksums()} if s else {"absent": True}
        for name, s in raws.items()
    }
    inputs = {name: s.checksums() if s else None for name, s in raws.items()}
    release_id = release_id_for(inputs, TRANSFORM_VERSION, settings.fingerprint())
    rows = visualprm_export["rows"]

    store = ReleaseStore(layout.releases)
    store.sweep_temporaries()
    manifest, published = store.publish(
        release_id,
        tables,
        code_version=TRANSFORM_VERSION,
        sources=sources,
        settings=settings.fingerprint(),
        files={rel: Path(p) for rel, p in visualprm_export["files"].items()},
        bulk={"exports/images": {rel[len("images/"):]: Path(p) for rel, p in visualprm_export["images"].items()}},
        rendered={"exports/visualprm_train_meta.json": lambda final: render_meta(final / "exports", rows)},
        summary={"export": {"rows": rows, "removed": visualprm_export["removed"]}},
    )
    pruned = store.prune(settings.keep_releases)
    sync_warehouse(store, layout.warehouse)
    context.log.info(
        f"release {release_id} {'published' if published else 'unchanged, nothing new published'}"
        + (f"; pruned {', '.join(pruned)}" if pruned else "")
    )
    return dg.MaterializeResult(
        metadata={
            "release_id": release_id,
            "published": published,
            "warehouse": dg.MetadataValue.path(str(layout.warehouse)),
            "release_dir": dg.MetadataValue.path(str(store.path(release_id))),
            **{f"rows_{t}": dg.MetadataValue.int(n) for t, n in manifest.row_counts.items()},
        }
    )
