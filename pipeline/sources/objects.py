"""Reading objects of an S3-compatible store by range, as seekable files (needs the `scale` extra).

Configured by the standard AWS variables (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_REGION`), which obstore reads itself: credentials are never copied
into settings, logs or files.
"""

from __future__ import annotations

from typing import BinaryIO

from pipeline import env


def is_object_url(path) -> bool:
    return str(path).startswith("s3://")


def client_config() -> dict:
    """obstore keyword arguments for the endpoint and region of the environment (keys excluded)."""
    endpoint = env.aws_endpoint_url()
    config = {**({"endpoint": endpoint} if endpoint else {}), **({"region": env.aws_region()} if env.aws_region() else {})}
    options = {"allow_http": True} if endpoint and endpoint.startswith("http://") else {}
    return {"config": config, "client_options": options}


def filesystem():
    """An fsspec filesystem over obstore for `s3://` paths."""
    from obstore.fsspec import FsspecStore

    return FsspecStore("s3", **client_config())


def open_object(url: str, block_size: int = 4 * 1024 * 1024) -> BinaryIO:
    """A seekable, read-only file over `s3://bucket/key`: each read fetches the range it needs
    (read ahead by `block_size`), so a zip's central directory or one entry costs only its bytes."""
    return filesystem().open(url[len("s3://"):], "rb", block_size=block_size)


def open_local_or_object(path) -> BinaryIO:
    return open_object(str(path)) if is_object_url(path) else open(path, "rb")
