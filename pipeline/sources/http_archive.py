"""An archive on an HTTP server (the Hub), read in place by Range requests: one file, or parts
cut by `split` (`images.zip_aa`, `_ab`, …) read as one. `zipfile` reads the central directory from
the end through it, and an entry is fetched as exactly the bytes of its local header and data
(`fetch_entry`), its CRC checked by `zipfile` as it inflates. A dropped connection resumes from
the byte it stopped at; bytes and requests are counted, so a caller can say what a resolve costs.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import zipfile
from collections import OrderedDict
from dataclasses import dataclass

from pipeline.archives import RandomAccessFile

READAHEAD = 64 * 1024
CACHED_SPANS = 16
RETRIES = 5


class RangeError(RuntimeError):
    """The server cannot serve ranges of a part, or kept failing; the message says which part.
    (Not an OSError: zipfile would take that for "not a zip file".)"""


@dataclass
class Traffic:
    bytes: int = 0
    requests: int = 0
    resumed: int = 0


class HttpParts(RandomAccessFile):
    """The concatenation of `urls` (with `sizes`), read by Range; spans read are cached."""

    def __init__(self, urls: list[str], sizes: list[int], headers: dict[str, str] | None = None,
                 opener: urllib.request.OpenerDirector | None = None, timeout: float = 60.0):
        self.urls, self.sizes = urls, sizes
        self.starts = [sum(sizes[:i]) for i in range(len(sizes))]
        self.size = sum(sizes)
        self.pos = 0
        self.headers = headers or {}
        self.opener = opener or urllib.request.build_opener()
        self.timeout = timeout
        self.spans: OrderedDict[int, bytes] = OrderedDict()
        self.traffic = Traffic()

    # --- fetching ----------------------------------------------------------------------------------
    def _get(self, part: int, start: int, end: int) -> bytes:
        """Bytes [start, end) of part `part`, resuming after a dropped connection."""
        out = bytearray()
        failures = 0
        while start + len(out) < end:
            first = start + len(out)
            request = urllib.request.Request(self.urls[part], headers={**self.headers, "Range": f"bytes={first}-{end - 1}"})
            self.traffic.requests += 1
            try:
                with self.opener.open(request, timeout=self.timeout) as resp:
                    if resp.status != 206:
                        raise RangeError(f"{self.urls[part]} answered {resp.status} to a Range request: "
                                         "the server does not serve byte ranges")
                    while first + (got := len(out)) - start < end - start:
                        block = resp.read(min(1 << 20, end - (start + got)))
                        if not block:
                            break
                        out += block
                        self.traffic.bytes += len(block)
            except (urllib.error.URLError, OSError) as exc:
                failures += 1
                if failures > RETRIES:
                    raise RangeError(f"{self.urls[part]}: bytes {first}-{end - 1} failed {failures} times: {exc}") from None
                time.sleep(min(0.2 * 2 ** failures, 5.0))
                continue
            if start + len(out) < end:
                self.traffic.resumed += 1  # the body ended early: ask for the rest
        return bytes(out)

    def fetch(self, start: int, length: int) -> bytes:
        """Bytes [start, start+length) of the whole, across parts, kept for the reads that follow."""
        end = min(start + length, self.size)
        pieces = []
        for i, (s, n) in enumerate(zip(self.starts, self.sizes)):
            lo, hi = max(start, s), min(end, s + n)
            if lo < hi:
                pieces.append(self._get(i, lo - s, hi - s))
        data = b"".join(pieces)
        self.spans[start] = data
        while len(self.spans) > CACHED_SPANS:
            self.spans.popitem(last=False)
        return data

    def forget(self) -> None:
        self.spans.clear()

    # --- reading -------------------------------------------------------------------------------------
    def _cached(self, pos: int, want: int) -> bytes | None:
        for start, data in reversed(self.spans.items()):
            if start <= pos < start + len(data):
                return data[pos - start:pos - start + want]
        return None

    def readinto(self, buffer) -> int:
        want = min(len(buffer), self.size - self.pos)
        if want <= 0:
            return 0
        chunk = self._cached(self.pos, want)
        if chunk is None:
            chunk = self.fetch(self.pos, max(want, READAHEAD))[:want]
        buffer[:len(chunk)] = chunk
        self.pos += len(chunk)
        return len(chunk)


def entry_span(info: zipfile.ZipInfo) -> tuple[int, int]:
    """(offset, length) of an entry's local header and data, as the central directory describes it."""
    return info.header_offset, 30 + len(info.orig_filename.encode("utf-8")) + len(info.extra) + info.compress_size


def fetch_entry(zf: zipfile.ZipFile, source: HttpParts, info: zipfile.ZipInfo, attempts: int = 2) -> bytes:
    """One entry, its exact bytes fetched and inflated with its CRC and size checked; a mismatch is
    fetched again (`attempts` in all), then raised as zipfile.BadZipFile."""
    for attempt in range(attempts):
        source.fetch(*entry_span(info))
        try:
            data = zf.read(info)
        except zipfile.BadZipFile:
            source.forget()
            if attempt + 1 == attempts:
                raise
            continue
        if len(data) != info.file_size:
            source.forget()
            if attempt + 1 == attempts:
                raise zipfile.BadZipFile(f"{info.filename}: {len(data)} bytes, the directory says {info.file_size}")
            continue
        return data
    raise AssertionError("unreachable")
