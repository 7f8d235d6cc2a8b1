"""`rewardhouse run --source hf` end to end, against a loopback Hub serving the generated sample."""

import duckdb

from pipeline.cli import main
from pipeline.settings import MMRB2_ANNOTATION_COMMIT, MMRB2_ANNOTATION_REPO, MMRB2_IMAGE_REPO
from pipeline.sources.sample import sample_facts, write_sample


def test_hf_source_downloads_publishes_and_does_not_download_twice(hub, home, tmp_path, monkeypatch, capsys):
    upstream = tmp_path / "upstream"
    write_sample(upstream)
    zip_bytes = (upstream / MMRB2_IMAGE_REPO / "image.zip").read_bytes()
    sha = hub.add_dataset_commit(MMRB2_IMAGE_REPO, {"image.zip": zip_bytes})
    bench = upstream / MMRB2_ANNOTATION_REPO / "benchmark"
    hub.add_raw_files(MMRB2_ANNOTATION_REPO, MMRB2_ANNOTATION_COMMIT,
                      {f"benchmark/{p.name}": p.read_bytes() for p in bench.glob("*.json")})
    monkeypatch.setenv("REWARDHOUSE_GITHUB_RAW", hub.url)

    assert main(["run", "--source", "hf"]) == 0
    assert "published" in capsys.readouterr().out
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        pairs = con.execute("select count(*) from mmrb2_pairs").fetchone()[0]
        sources = con.execute("select sources->'mmrb2'->'revisions' from releases").fetchone()[0]
    assert pairs == sum(sample_facts().pairs_per_task.values())
    assert MMRB2_IMAGE_REPO in sources and sha in sources
    assert (home / "raw" / "hf" / MMRB2_IMAGE_REPO / "image.zip").read_bytes() == zip_bytes

    hub.clear_log()
    assert main(["run", "--source", "hf"]) == 0
    assert "unchanged (no new release)" in capsys.readouterr().out
    assert hub.body_gets() == []
