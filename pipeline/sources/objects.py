"""Reading objects of an S3-compatible store by range, as seekable files (needs the `scale` extra).

Configured by the standard AWS variables (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_REGION`), which obstore reads itself: credentials are never copied
into settings, logs or files. A failure of the client becomes one `ObjectStoreError` line naming
the endpoint, the bucket and what to check (`client_errors`).
"""

from __future__ import annotations

import io
import re
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from pipeline import env
from pipeline.archives import RandomAccessFile

BLOCK_BYTES = 4 * 1024 * 1024
CACHED_BLOCKS = 4


class ObjectStoreError(RuntimeError):
    """The object store refused or failed an operation; the message says which and what to do."""


def endpoint() -> str:
    """The endpoint the client talks to, as users set it."""
    return env.aws_endpoint_url() or f"AWS S3 (region {env.aws_region() or 'from the AWS configuration'})"


def is_client_error(exc: BaseException) -> bool:
    """An error of the S3 client: obstore's BaseError, or its NotFound, which it raises as the
    builtin FileNotFoundError (told from a local file's by the request it names)."""
    from obstore.exceptions import BaseError

    return isinstance(exc, BaseError) or (isinstance(exc, FileNotFoundError) and "Error performing" in str(exc))


_DENIED = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
           "403 Forbidden", "401 Unauthorized")
_UNREACHABLE = ("error sending request", "connection refused", "timed out", "dns error", "connection reset",
                "connection closed")


def store_error(exc: BaseException, url: str, bucket: str, doing: str) -> ObjectStoreError:
    """One line for a failure of the S3 client: what failed, the endpoint, the bucket, what to check.
    The client's own message is several lines with a debug dump; only its gist is kept."""
    from obstore.exceptions import PermissionDeniedError, UnauthenticatedError

    text = str(exc)
    where = f"{doing} {url} (endpoint {endpoint()}, bucket {bucket})"
    if "NoSuchBucket" in text:
        why = f"the bucket {bucket} does not exist there; check the bucket in {url}, AWS_ENDPOINT_URL and AWS_REGION"
    elif isinstance(exc, (PermissionDeniedError, UnauthenticatedError)) or any(c in text for c in _DENIED):
        why = ("access denied; check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the profile) and that they "
               f"may read and write {url}")
    elif any(s in text.lower() for s in _UNREACHABLE):
        why = "the endpoint does not answer; check AWS_ENDPOINT_URL and that the store is up and reachable from here"
    else:
        code = re.search(r"<Code>(.*?)</Code>.*?<Message>(.*?)</Message>", text)
        gist = f"{code[1]}: {code[2]}" if code else (text.strip().splitlines() or [""])[0]
        why = f"{type(exc).__name__}: {gist[:300]}"
    return ObjectStoreError(f"{where}: {why}")


@contextmanager
def client_errors(url: str, bucket: str, doing: str):
    """Turn a failure of the S3 client inside the block into `store_error`'s one line. A refused
    conditional write (create-only, compare-and-swap) passes through: it is an answer, not a failure."""
    from obstore.exceptions import AlreadyExistsError, PreconditionError

    try:
        yield
    except (ObjectStoreError, AlreadyExistsError, PreconditionError):
        raise
    except Exception as exc:
        if is_client_error(exc):
            raise store_error(exc, url, bucket, doing) from None
        raise


def is_object_url(path) -> bool:
    return str(path).startswith("s3://")


def client_config() -> dict:
    """obstore keyword arguments for the endpoint and region of the environment (keys excluded)."""
    endpoint = env.aws_endpoint_url()
    config = {**({"endpoint": endpoint} if endpoint else {}), **({"region": env.aws_region()} if env.aws_region() else {})}
    options = {"allow_http": True} if endpoint and endpoint.startswith("http://") else {}
    return {"config": config, "client_options": options}


def bucket_store(bucket: str):
    """An obstore client for one bucket, configured from the AWS environment."""
    from obstore.store import S3Store

    client = client_config()
    return S3Store(bucket, config=client["config"], client_options=client["client_options"])


def _split(url: str) -> tuple[str, str]:
    bucket, _, key = url[len("s3://"):].partition("/")
    return bucket, key


def read_object(url: str) -> bytes | None:
    """The whole object at `s3://bucket/key`, or None when there is none."""
    import obstore

    bucket, key = _split(url)
    with client_errors(url, bucket, "cannot read"):
        try:
            return bytes(obstore.get(bucket_store(bucket), key).bytes())
        except FileNotFoundError as exc:
            if "NoSuchBucket" in str(exc):  # not an absent object: the bucket itself is missing
                raise
            return None


def write_object(url: str, data: bytes) -> None:
    import obstore

    bucket, key = _split(url)
    with client_errors(url, bucket, "cannot write"):
        obstore.put(bucket_store(bucket), key, data)


def filesystem():
    """An fsspec filesystem over obstore for `s3://` paths."""
    from obstore.fsspec import FsspecStore

    return FsspecStore("s3", **client_config())


class RangeFile(RandomAccessFile):
    """A seekable, read-only file over one object, read by HTTP range in aligned blocks of
    `block` bytes, the last few kept: a zip's central directory, or a run of neighbouring
    entries, costs a request per block, however many small reads and seeks `zipfile` makes."""

    def __init__(self, store, key: str, block: int = BLOCK_BYTES):
        import obstore

        self._obstore, self.store, self.key, self.block = obstore, store, key, block
        self.size = obstore.head(store, key)["size"]
        self.pos = 0
        self.blocks: OrderedDict[int, bytes] = OrderedDict()
        self.requests = 0

    def _block(self, index: int) -> bytes:
        if index in self.blocks:
            self.blocks.move_to_end(index)
            return self.blocks[index]
        start = index * self.block
        data = bytes(self._obstore.get_range(self.store, self.key, start=start,
                                             length=min(self.block, self.size - start)))
        self.requests += 1
        self.blocks[index] = data
        if len(self.blocks) > CACHED_BLOCKS:
            self.blocks.popitem(last=False)
        return data

    def readinto(self, buffer) -> int:
        want = min(len(buffer), self.size - self.pos)
        if want <= 0:
            return 0
        view, done = memoryview(buffer), 0
        while done < want:
            index, offset = divmod(self.pos, self.block)
            chunk = self._block(index)[offset:offset + want - done]
            view[done:done + len(chunk)] = chunk
            done += len(chunk)
            self.pos += len(chunk)
        return done


def open_object(url: str, block: int = BLOCK_BYTES) -> BinaryIO:
    """A seekable, read-only file over `s3://bucket/key` (see RangeFile)."""
    bucket, key = _split(url)
    return io.BufferedReader(RangeFile(bucket_store(bucket), key, block), buffer_size=64 * 1024)  # type: ignore[return-value]


def open_object_archive(url: str) -> BinaryIO:
    """An archive in a bucket as one seekable file: one object, or a zip split into parts named by
    its first (`…/images.zip_aa`), every part beside it read by range as one."""
    from pipeline.archives import SPLIT, ConcatFile, split_part_names

    bucket, key = _split(url)
    folder, _, name = key.rpartition("/")
    if SPLIT.match(name) is None:
        return open_object(url)
    store = bucket_store(bucket)
    import obstore

    # object_store lists by whole path segments: list the folder, keep the names in it.
    listed = {m["path"].rpartition("/")[2]: m["size"] for batch in obstore.list(store, prefix=folder or None) for m in batch
              if m["path"].rpartition("/")[0] == folder}
    names = split_part_names(name, list(listed), f"s3://{bucket}/{folder}".rstrip("/"))
    keys = [f"{folder}/{n}" if folder else n for n in names]
    listed = {f"{folder}/{n}" if folder else n: size for n, size in listed.items()}
    sizes = [listed[k] for k in keys]
    raw = ConcatFile([Path(k) for k in keys], sizes, lambda i: RangeFile(store, keys[i]))
    return io.BufferedReader(raw, buffer_size=64 * 1024)  # type: ignore[return-value]


def open_local_or_object(path) -> BinaryIO:
    return open_object(str(path)) if is_object_url(path) else open(path, "rb")
