"""Where RLAIF-V lives upstream and in a mirror (a leaf: the source and the sample both read it)."""

REPO = "openbmb/RLAIF-V-Dataset"
PARQUET_GLOB = "RLAIF-V-Dataset_*.parquet"  # at the repository's root: DIR/openbmb/RLAIF-V-Dataset/RLAIF-V-Dataset_000.parquet
