"""Split zip parts on the loopback Hub, read by Range: the central directory from the end and only
the referenced entries, bytes counted; a damaged entry fetched again, then refused; a dropped
connection resumed."""

from __future__ import annotations

import functools
import io
import zipfile

import pytest

from dedupe_images import encode, photo
from hf_server import FakeHub
from pipeline.sources.http_archive import HttpParts, RangeError, entry_span, fetch_entry
from test_image_roots import build_zip

pytestmark = pytest.mark.fast


@functools.lru_cache(maxsize=1)
def archive() -> tuple[dict[str, bytes], bytes]:
    entries = {f"VisualPRM400K/images/src{i % 7}/{i}.jpg": encode(photo(300 + i), "JPEG", 90) for i in range(100)}
    return entries, build_zip(entries)


@pytest.fixture
def served():
    entries, data = archive()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        inside_directory = zf.start_dir + (len(data) - zf.start_dir) // 2
    cuts = [0, len(data) // 3 + 17, inside_directory, len(data)]  # an entry and the directory straddle cuts
    parts = {f"images.zip_a{'abc'[i]}": data[a:b] for i, (a, b) in enumerate(zip(cuts, cuts[1:]))}
    with FakeHub() as hub:
        sha = hub.add_dataset_commit("OpenGVLab/VisualPRM400K", parts)
        urls = [f"{hub.url}/datasets/OpenGVLab/VisualPRM400K/resolve/{sha}/{name}" for name in parts]
        yield hub, urls, [len(p) for p in parts.values()], entries, len(data)


def test_the_directory_and_one_percent_of_the_entries_cost_only_their_bytes(served):
    hub, urls, sizes, entries, total = served
    source = HttpParts(urls, sizes)
    zf = zipfile.ZipFile(source)
    directory = source.traffic.bytes
    assert len(zf.infolist()) == 100 and directory < 64 * 1024 + 22 + 100 * 120  # the end of the archive only
    wanted = [zf.getinfo(name) for name in sorted(entries)[::100]]  # 1 %
    assert [fetch_entry(zf, source, info) for info in wanted] == [entries[i.filename] for i in wanted]
    spans = sum(entry_span(i)[1] for i in wanted)
    assert source.traffic.bytes == directory + spans  # exactly the directory read and the entries
    served_bytes = sum(int(r.range.split("-")[1]) - int(r.range.split("=")[1].split("-")[0]) + 1 for r in hub.body_gets())
    assert served_bytes == source.traffic.bytes < total / 10


def test_an_entry_across_a_part_boundary_is_read_whole(served):
    _, urls, sizes, entries, _ = served
    source = HttpParts(urls, sizes)
    zf = zipfile.ZipFile(source)
    across = [i for i in zf.infolist() if i.header_offset < sizes[0] < sum(entry_span(i))]
    assert len(across) == 1
    assert fetch_entry(zf, source, across[0]) == entries[across[0].filename]


def test_a_damaged_entry_is_fetched_again_then_refused(served):
    hub, urls, sizes, entries, _ = served
    source = HttpParts(urls, sizes)
    zf = zipfile.ZipFile(source)
    info = zf.infolist()[10]
    part = next(name for name, url in zip(("images.zip_aa", "images.zip_ab", "images.zip_ac"), urls)
                if sum(sizes[:urls.index(url)]) <= info.header_offset < sum(sizes[:urls.index(url) + 1]))
    hub.serve_damaged(part, times=1)  # one corrupted answer: the second fetch is good
    assert fetch_entry(zf, source, info) == entries[info.filename]
    hub.serve_damaged(part, times=2)  # corrupted every time: refused
    with pytest.raises(zipfile.BadZipFile, match="CRC"):
        fetch_entry(zf, source, info)


def test_a_dropped_connection_resumes_from_the_byte_it_stopped_at(served):
    hub, urls, sizes, entries, _ = served
    source = HttpParts(urls, sizes)
    zf = zipfile.ZipFile(source)
    info = max(zf.infolist()[:30], key=lambda i: i.compress_size)
    hub.drop_connection_after("images.zip_aa", 1000)
    before = source.traffic.bytes
    assert fetch_entry(zf, source, info) == entries[info.filename]
    assert source.traffic.resumed == 1 and source.traffic.bytes - before == entry_span(info)[1]


def test_a_server_that_ignores_ranges_is_refused_in_one_line(served):
    hub, urls, sizes, _, _ = served
    hub.honour_range = False
    with pytest.raises(RangeError, match="does not serve byte ranges"):
        zipfile.ZipFile(HttpParts(urls, sizes))
