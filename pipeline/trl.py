"""Training files in TRL's dataset types, as Parquet that Hugging Face `datasets` loads with typed
features: `datasets.load_dataset("parquet", data_files=path)` gives `Image` features for the
images, so a TRL trainer (and its processor) takes the file as it is.

Two types (TRL's "Dataset formats and types"), each row led by `id` (the record it comes from; the
trainers leave a column they do not use alone):

    stepwise supervision  prompt: string, completions: list of strings (the steps), labels: list
                          of bools (is the solution right up to this step), images: list of Image
    preference            conversational, as TRL's vision preference examples hold it: prompt =
                          [{role: user, content: [{type: image}, ..., {type: text, text}]}],
                          chosen / rejected = [{role: assistant, content: [{type: text, text}]}],
                          images: list of Image

Images are embedded (bytes, and the file name as `path`), as the Hub's own Parquet holds them: the
file loads anywhere, without the release folder beside it. The features are stated in the schema's
`huggingface` metadata in the form every `datasets` release since 2.x reads (`Sequence`, lists of
dicts as one-item lists). Rows are written in batches: memory holds one batch of images, whatever
the size of the set. Generic: a dataset's export builds the rows (prompt, texts, image files).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.staging import parquet_options

STEPWISE, PREFERENCE = "stepwise_supervision", "preference"
BATCH_ROWS = 64  # rows (with their images) held at once: about 15 MB of 1024 px JPEGs

_IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
_CONTENT = pa.struct([("type", pa.string()), ("text", pa.string())])
_MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.list_(_CONTENT))]))

SCHEMAS = {
    STEPWISE: pa.schema([("id", pa.string()), ("prompt", pa.string()), ("completions", pa.list_(pa.string())),
                         ("labels", pa.list_(pa.bool_())), ("images", pa.list_(_IMAGE))]),
    PREFERENCE: pa.schema([("id", pa.string()), ("prompt", _MESSAGES), ("chosen", _MESSAGES), ("rejected", _MESSAGES),
                           ("images", pa.list_(_IMAGE))]),
}


def _value(dtype: str) -> dict:
    return {"dtype": dtype, "_type": "Value"}


def _sequence(feature: dict) -> dict:
    return {"feature": feature, "_type": "Sequence"}


_IMAGES = _sequence({"_type": "Image"})
_MESSAGES_FEATURE = [{"role": _value("string"), "content": [{"type": _value("string"), "text": _value("string")}]}]

FEATURES = {
    STEPWISE: {"id": _value("string"), "prompt": _value("string"), "completions": _sequence(_value("string")),
               "labels": _sequence(_value("bool")), "images": _IMAGES},
    PREFERENCE: {"id": _value("string"), "prompt": _MESSAGES_FEATURE, "chosen": _MESSAGES_FEATURE, "rejected": _MESSAGES_FEATURE,
                 "images": _IMAGES},
}


def schema(kind: str) -> pa.Schema:
    """The Arrow schema of a TRL type, with the `datasets` features in its metadata."""
    meta = {"huggingface": json.dumps({"info": {"features": FEATURES[kind]}})}
    return SCHEMAS[kind].with_metadata(meta)


def user_turn(text: str, images: int) -> list[dict]:
    """A conversational prompt: one user turn showing `images` images, then the text."""
    return [{"role": "user", "content": [*({"type": "image", "text": None} for _ in range(images)),
                                         {"type": "text", "text": text}]}]


def assistant_turn(text: str) -> list[dict]:
    return [{"role": "assistant", "content": [{"type": "text", "text": text}]}]


class TrlWriter:
    """Rows of one TRL type into one Parquet file, written under a temporary name and renamed
    into place on `close()` (a killed export leaves no half file under the final name). A row is
    a dict of the type's text columns plus `images`: the image files' keys, which
    `read_image(key) -> (bytes, file name)` turns into what is embedded."""

    def __init__(self, path: Path, kind: str, read_image: Callable[[str], tuple[bytes, str]]):
        self.path, self.kind, self.read_image = Path(path), kind, read_image
        self.schema = schema(kind)
        self.rows = 0
        self._pending: list[dict] = []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:8]}")
        self._writer = pq.ParquetWriter(self._tmp, self.schema, **parquet_options(self.schema))  # image bytes plain

    def add(self, row: dict) -> None:
        self._pending.append(row)
        if len(self._pending) >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        rows = []
        for row in self._pending:
            images = []
            for key in row["images"]:
                data, name = self.read_image(key)
                images.append({"bytes": data, "path": name})
            rows.append({**row, "images": images})
        self._writer.write_table(pa.Table.from_pylist(rows, schema=self.schema))
        self.rows += len(rows)
        self._pending = []

    def close(self) -> Path:
        try:
            self._flush()
            self._writer.close()
            os.replace(self._tmp, self.path)
        finally:
            self._tmp.unlink(missing_ok=True)
        return self.path

    def abort(self) -> None:
        self._writer.close()
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> "TrlWriter":
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


def store_reader(store: Path) -> Callable[[str], tuple[bytes, str]]:
    """read_image for files of the content-addressed image store, keyed by their store path."""
    def read(rel: str) -> tuple[bytes, str]:
        return (Path(store) / rel).read_bytes(), Path(rel).name

    return read
