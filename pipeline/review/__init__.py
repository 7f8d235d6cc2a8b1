"""The visual review of a release's decisions (duplicate clusters, contamination): thumbnails and
the static page. Pure logic, no Dagster."""
