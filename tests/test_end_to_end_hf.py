"""`rewardhouse run --source hf` end to end, against a loopback Hub serving the generated sample."""

import duckdb

from pipeline.cli import main
from pipeline.settings import MMRB2_IMAGE_REPO, VISUALPRM_REPO
from conftest import serve_samples
from pipeline.visualprm.sample import PARQUET_RELPATH
from pipeline.vlrb.sample import RELPATH as VLRB_RELPATH
from pipeline.vlrb.sample import parquet_bytes as vlrb_parquet_bytes


def test_hf_source_downloads_publishes_and_does_not_download_twice(hub, home, tmp_path, monkeypatch, capsys):
    upstream = tmp_path / "upstream"
    commits = serve_samples(hub, upstream, monkeypatch)
    sha, prm_sha, vlrb_sha = commits[MMRB2_IMAGE_REPO], commits[VISUALPRM_REPO], commits["vlrb"]
    zip_bytes = (upstream / MMRB2_IMAGE_REPO / "image.zip").read_bytes()
    shard = (upstream / PARQUET_RELPATH).read_bytes()

    assert main(["run", "--source", "hf"]) == 0
    assert "published" in capsys.readouterr().out
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        pairs = con.execute("select count(*) from mmrb2_pairs").fetchone()[0]
        sources = con.execute("select sources->'mmrb2'->'revisions' from releases").fetchone()[0]
        prm_sources = con.execute("select sources->'visualprm'->'revisions' from releases").fetchone()[0]
        samples = con.execute("select count(*) from prm_samples").fetchone()[0]
        vlrb_sources = con.execute("select sources->'vlrb'->'revisions' from releases").fetchone()[0]
        vlrb_pairs = con.execute("select count(*) from vlrb_pairs").fetchone()[0]
    assert pairs == 29  # 8 t2i, 8 edit, 6 interleaved, 7 reasoning
    assert MMRB2_IMAGE_REPO in sources and sha in sources
    assert prm_sha in prm_sources and samples == 236
    assert vlrb_sha in vlrb_sources and vlrb_pairs == 96
    assert (home / "raw" / "hf" / VLRB_RELPATH).read_bytes() == vlrb_parquet_bytes()
    assert (home / "raw" / "hf" / PARQUET_RELPATH).read_bytes() == shard
    assert (home / "raw" / "hf" / MMRB2_IMAGE_REPO / "image.zip").read_bytes() == zip_bytes

    hub.clear_log()
    assert main(["run", "--source", "hf"]) == 0
    assert "unchanged (no new release)" in capsys.readouterr().out
    assert hub.body_gets() == []
