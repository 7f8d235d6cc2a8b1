"""`rewardhouse dedupe DIR` on a folder with planted copies and a broken file."""

import csv
import io
from contextlib import contextmanager

from PIL import Image, ImageDraw, ImageEnhance

from pipeline.cli import main


def picture(seed: int, size=(320, 240)) -> Image.Image:
    im = Image.new("RGB", size, (20 * seed % 255, 90, 160))
    draw = ImageDraw.Draw(im)
    for i in range(6):
        x, y = (seed * 53 + i * 71) % size[0], (seed * 29 + i * 43) % size[1]
        draw.ellipse([x - 40, y - 30, x + 40, y + 30], fill=((seed * 80 + i * 40) % 255, (i * 90) % 255, (seed * 30) % 255))
    draw.rectangle([0, 0, size[0] // (2 + seed % 3), size[1]], fill=(240 - seed * 20 % 200, 30, 30))
    return im


def _pool_sized_folder(tmp_path, count: int, size: tuple[int, int]):
    """A folder of `count` JPEG pictures (enough for the hashing pool when count >= SMALL_BATCH) and
    the `rewardhouse` command beside this interpreter."""
    import sys
    from pathlib import Path

    d = tmp_path / "imgs"
    d.mkdir()
    for seed in range(count):
        picture(seed, size).save(d / f"p{seed:04d}.jpg", quality=90)
    return d, Path(sys.executable).with_name("rewardhouse")


@contextmanager
def _ctrl_c_reaches_children():
    """While inside, the processes this one starts begin with SIGINT at its default, as from a
    terminal, whatever this process does with it: an ignored SIGINT is inherited across exec (a
    background job's), a handler is not."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _group_ends(pgid: int, what: str, within: float = 10.0) -> None:
    """Every process of the group `pgid` (a command started in a session of its own) is gone within
    `within` seconds."""
    import os
    import time

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)  # a process of the group still there
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"processes of {what} still running after {within:g} s")


def test_folder_with_copies_and_a_broken_file(tmp_path, capsys):
    d = tmp_path / "imgs"
    (d / "sub").mkdir(parents=True)
    original = picture(1)
    original.save(d / "a.jpg", quality=92)
    (d / "sub" / "a_exact.jpg").write_bytes((d / "a.jpg").read_bytes())
    original.resize((240, 180)).save(d / "sub" / "a_small.png")
    ImageEnhance.Brightness(original).enhance(1.1).save(d / "a_bright.webp", quality=90)
    picture(4).save(d / "b.bmp")
    picture(7).save(d / "c.gif")
    (d / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    (d / "notes.txt").write_text("ignored: not an image suffix")

    out = tmp_path / "clusters.csv"
    assert main(["dedupe", str(d), "--output", str(out), "--workers", "1"]) == 0
    err = capsys.readouterr().err
    assert "skipped unreadable broken.jpg" in err and "Traceback" not in err
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert list(rows[0]) == ["path", "cluster_id", "is_canonical", "distance", "kind", "score"]
    by_path = {r["path"]: r for r in rows}
    assert set(by_path) == {"a.jpg", "sub/a_exact.jpg", "sub/a_small.png", "a_bright.webp", "b.bmp", "c.gif"}
    family = {by_path[p]["cluster_id"] for p in ("a.jpg", "sub/a_exact.jpg", "sub/a_small.png", "a_bright.webp")}
    assert len(family) == 1
    assert len({by_path["b.bmp"]["cluster_id"], by_path["c.gif"]["cluster_id"]} | family) == 3
    canon = [p for p, r in by_path.items() if r["cluster_id"] in family and r["is_canonical"] == "true"]
    assert len(canon) == 1 and canon[0] in ("a.jpg", "sub/a_exact.jpg", "a_bright.webp")  # full-size ones
    assert by_path["b.bmp"]["is_canonical"] == "true" and by_path["b.bmp"]["distance"] == "0"
    assert int(by_path["sub/a_small.png"]["distance"]) <= 8
    kinds = {p: by_path[p]["kind"] for p in ("a.jpg", "sub/a_exact.jpg", "sub/a_small.png", "a_bright.webp") if p != canon[0]}
    exact_pair = {"a.jpg", "sub/a_exact.jpg"}
    for p, kind in kinds.items():
        if p in exact_pair and canon[0] in exact_pair:
            assert kind == "exact" and by_path[p]["score"] == "1.0000"
        else:
            assert kind == "near" and 0.965 <= float(by_path[p]["score"]) <= 1.0
    assert by_path["b.bmp"]["kind"] == "" and by_path["b.bmp"]["score"] == ""
    assert "1 unreadable" in err and "duplicates (" in err


def test_explain_prints_the_comparison_of_one_pair(tmp_path, capsys):
    from tests.dedupe_images import bar_chart, caption, encode, photo, pie_chart

    d = tmp_path / "imgs"
    d.mkdir()
    (d / "photo.jpg").write_bytes(encode(photo(5), "JPEG", 90))
    (d / "photo_caption.jpg").write_bytes(encode(caption(photo(5), "bottom-right"), "JPEG", 90))
    (d / "chart.png").write_bytes(encode(bar_chart([0.3, 0.8, 0.5, 0.6])))
    (d / "other.png").write_bytes(encode(bar_chart([0.7, 0.2, 0.4, 0.9])))  # same layout, other data
    (d / "pie.png").write_bytes(encode(pie_chart([1, 2, 3, 4])))  # no alignment holds between a bar chart and a pie

    assert main(["dedupe", str(d), "--explain", "photo.jpg", str(d / "photo_caption.jpg")]) == 0
    out = capsys.readouterr().out
    assert "candidate search, Hamming distance per route (radius 8): phash " in out
    # The residual map's figures: the one differing region sits in the bottom-right corner.
    assert "residual map: " in out and "largest region rows " in out
    assert "alignment: the whole frame (accepted there, no fit)" in out
    region = out.split("accepted as overlay: the same pixels but inside rows ")[1].split("\n")[0]
    (y0, y1), (x0, x1) = (map(int, part.split(" ")[-1].split("-")) for part in region.split(" of ")[0].split(", columns "))
    assert y1 == 128 and x1 == 128 and y0 >= 96 and x0 >= 64, region
    assert out.rstrip().endswith("\nduplicates")

    assert main(["dedupe", str(d), "--explain", "chart.png", "other.png"]) == 0
    out = capsys.readouterr().out
    assert "rejected by verification" in out and out.rstrip().endswith("not duplicates")
    # refused at the whole frame: the line says whether an alignment was fitted, never "accepted there"
    assert "accepted there" not in out
    assert ("alignment: fitted (refused at the whole frame)" in out
            or "alignment: the whole frame (refused there, and no alignment fitted either way)" in out)

    assert main(["dedupe", str(d), "--explain", "chart.png", "pie.png"]) == 0
    out = capsys.readouterr().out
    assert "alignment: the whole frame (refused there, and no alignment fitted either way)" in out, out
    assert out.rstrip().endswith("not duplicates")

    assert main(["dedupe", str(d), "--explain", "chart.png", "missing.png"]) == 2
    assert "missing.png is not a file" in capsys.readouterr().err


def test_explain_agrees_with_the_search_on_a_picture_of_two_plain_areas(tmp_path, capsys):
    """A two-tone picture's hashes have a few bits set; the search leaves such hashes out of every
    route (they would match every such picture), and --explain says so rather than "duplicates"."""
    from pipeline.dedupe.engine import DEGENERATE_BITS, popcount
    from pipeline.dedupe.hashing import hash_files

    d = tmp_path / "imgs"
    d.mkdir()
    im = Image.new("RGB", (480, 400), (8, 80, 120))
    ImageDraw.Draw(im).rectangle([350, 0, 480, 400], fill=(214, 240, 226))
    im.save(d / "two_tone.jpg", quality=90)
    im.convert("L").convert("RGB").save(d / "two_tone_grey.jpg", quality=90)
    for h in hash_files([(p.name, p) for p in sorted(d.iterdir())], workers=1):
        assert max(popcount([h.phash, h.crop_hash, h.top_hash, h.bottom_hash])) < DEGENERATE_BITS, h.key

    assert main(["dedupe", str(d), "--explain", "two_tone.jpg", "two_tone_grey.jpg"]) == 0
    out = capsys.readouterr().out
    assert "phash -, crop -, top -, bottom -, robust -" in out, out
    assert "not a candidate: every route's hash has fewer than" in out
    assert out.rstrip().endswith("\nnot duplicates")
    out = tmp_path / "clusters.csv"
    assert main(["dedupe", str(d), "--output", str(out), "--workers", "1"]) == 0
    clusters = {r["path"]: r["cluster_id"] for r in csv.DictReader(io.StringIO(out.read_text()))}
    assert len(clusters) == 2 and len(set(clusters.values())) == 2, clusters  # the engine: not paired either


def test_the_command_starts_without_dagster_or_pandas(tmp_path):
    """`rewardhouse dedupe` as its own process imports neither Dagster nor pandas (0.8 s that
    pyarrow would spend on it), so a small folder is hashed at once; nor DuckDB, as a few thousand
    hashes are searched pair by pair (search.every_pair)."""
    import subprocess
    import sys

    from tests.dedupe_images import encode, photo

    for i in range(3):
        (tmp_path / f"{i}.png").write_bytes(encode(photo(i, (96, 64))))
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "pipeline.cli", "dedupe", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "numpy" in imported and "pyarrow" in imported
    assert not {m for m in imported if m.split(".")[0] in ("pandas", "dagster", "great_expectations", "duckdb")}
    assert done.stdout.count("\n") == 4  # the CSV header and one row per image


def test_progress_written_to_a_log_is_whole_lines(tmp_path):
    """stderr that is not a terminal (a log, a CI job) gets whole progress lines, not one line
    rewritten with carriage returns."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    d = tmp_path / "imgs"
    d.mkdir()
    for seed in range(12):
        picture(seed).save(d / f"p{seed}.png")
    cli = Path(sys.executable).with_name("rewardhouse")
    done = subprocess.run([str(cli), "dedupe", str(d), "--workers", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr
    *progress, summary = done.stderr.splitlines()
    assert progress and all(re.fullmatch(r"hashed \d+/12 images \(\d+/s\)", line) for line in progress), progress
    assert progress[-1].startswith("hashed 12/12 ") and summary.startswith("12 images, ")


def test_a_folder_a_pool_hashes_starts_its_fork_server_early_and_finds_the_copies(tmp_path):
    """A folder of more images than one process hashes alone (hashing.SMALL_BATCH) goes to the
    pool, whose fork server `rewardhouse dedupe` starts before it lists the images: the planted
    copies are found as with one process, every image hashed once; `_more_files_than` counts only
    as far as it needs to."""
    import subprocess
    import sys
    from pathlib import Path

    from pipeline.cli import _more_files_than
    from pipeline.dedupe.hashing import SMALL_BATCH

    d = tmp_path / "imgs"
    d.mkdir()
    n = SMALL_BATCH + 20
    for seed in range(n):
        picture(seed, (96, 72)).save(d / f"p{seed:04d}.jpg", quality=90)
    picture(3, (96, 72)).resize((80, 60)).save(d / "copy_of_p0003.png")
    assert _more_files_than(d, n) and not _more_files_than(d, n + 1) and not _more_files_than(tmp_path / "none", 0)
    cli = Path(sys.executable).with_name("rewardhouse")
    done = subprocess.run([str(cli), "dedupe", str(d), "--workers", "2"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert len(rows) == n + 1
    by_path = {r["path"]: r for r in rows}
    assert by_path["copy_of_p0003.png"]["cluster_id"] == by_path["p0003.jpg"]["cluster_id"]
    assert done.stderr.splitlines()[-1].startswith(f"{n + 1} images, ")


def test_ctrl_c_in_the_first_second_ends_quietly_and_leaves_no_process(tmp_path):
    """Ctrl-C (SIGINT to the whole process group) while `rewardhouse dedupe` of a folder the pool
    hashes is starting, its fork server included: one line, exit 130, no traceback from any
    process of the group, the interrupt never lost, and nothing of it left running a moment later."""
    import os
    import signal
    import subprocess
    import time

    from pipeline.dedupe.hashing import SMALL_BATCH

    d, cli = _pool_sized_folder(tmp_path, SMALL_BATCH + 20, (96, 72))
    for delay in (0.1, 0.15, 0.2, 0.3, 0.5):
        with _ctrl_c_reaches_children():
            p = subprocess.Popen([str(cli), "dedupe", str(d)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True, start_new_session=True)
        time.sleep(delay)
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=60)
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, (delay, err[-3000:])
        # it may have finished first; or the signal came before Python's own handler (a slow start)
        assert p.returncode in (0, 130, -signal.SIGINT), (delay, p.returncode, err)
        # never lost (a Ctrl-C while the fork server is spawned is held, not ignored): no run of
        # this folder is done within 0.3 s, the pool's start alone takes longer
        assert delay > 0.3 or p.returncode != 0, (delay, err)
        if p.returncode == 130:
            assert err.strip().splitlines()[-1] == "rewardhouse: interrupted", (delay, err)
        _group_ends(p.pid, f"the interrupted run (delay {delay})")


def test_sigterm_ends_the_command_in_one_line_with_exit_143_and_leaves_nothing_running(tmp_path):
    """A job scheduler's or `timeout`'s SIGTERM to `rewardhouse dedupe` while it hashes over the pool,
    verifies, or loads: one line, exit 143, no traceback, no leaked-semaphore warning from
    multiprocessing's resource tracker, and no process of the command left (it used to die by the
    signal, -15, with that warning)."""
    import os
    import signal
    import subprocess
    import time

    from pipeline.dedupe.hashing import SMALL_BATCH

    d, cli = _pool_sized_folder(tmp_path, SMALL_BATCH + 80, (320, 240))
    ended = 0
    for delay in (0.05, 0.3, 0.6, 0.9, 1.2):
        p = subprocess.Popen([str(cli), "dedupe", str(d)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
        time.sleep(delay)
        try:
            os.kill(p.pid, signal.SIGTERM)  # the command's own process, as `kill PID` and `timeout` send it
        except ProcessLookupError:  # it had finished
            pass
        _, err = p.communicate(timeout=30)
        assert p.returncode in (0, 143), (delay, p.returncode, err[-2000:])
        assert "Traceback" not in err and "leaked" not in err, (delay, err[-2000:])
        if p.returncode == 143:
            ended += 1
            assert err.strip().splitlines()[-1] == "rewardhouse: terminated", (delay, err[-2000:])
        _group_ends(p.pid, f"the terminated command (delay {delay})")
    assert ended >= 3  # most of the delays land while it works


def test_a_stop_swallowed_by_a_finalizer_is_sent_again_and_other_errors_are_reported():
    """cli._stop_swallowed (sys.unraisablehook of the commands other than `run`): a Terminated or a
    KeyboardInterrupt that Python could only print as ignored (raised inside a finalizer or a C
    callback) comes back as its signal 50 ms later; anything else goes to the previous hook."""
    import signal
    import threading
    import time
    from types import SimpleNamespace

    from pipeline import cli

    got, previous_seen = [], []
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for sig in saved:
            signal.signal(sig, lambda signum, frame: got.append(signum))
        assert threading.current_thread() is threading.main_thread()
        for exc, expected in ((cli.Terminated(), signal.SIGTERM), (KeyboardInterrupt(), signal.SIGINT)):
            got.clear()
            cli._stop_swallowed(SimpleNamespace(exc_value=exc), previous=previous_seen.append)
            assert got == []  # not at once: the code that swallowed it may still be running
            deadline = time.monotonic() + 5
            while not got and time.monotonic() < deadline:
                time.sleep(0.01)
            assert got == [expected]
        other = SimpleNamespace(exc_value=ValueError("a finalizer's own error"))
        cli._stop_swallowed(other, previous=previous_seen.append)
        assert previous_seen == [other]
        time.sleep(0.1)
        assert len(got) == 1
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_the_fork_server_says_nothing_of_a_worker_whose_pool_is_gone_and_everything_else():
    """pool_warm.quiet_lost_pool, the fork server's excepthook: a worker that cannot read its pool's
    semaphore (unlinked: the pool was torn down while it was forked) ends without a traceback; any
    other error of a forked child keeps it."""
    import io
    import sys
    from contextlib import redirect_stderr
    import signal
    from multiprocessing import synchronize

    before = signal.getsignal(signal.SIGINT)
    from pipeline.dedupe import pool_warm

    # outside the fork server, importing it leaves the process's Ctrl-C alone (an ignored SIGINT
    # would be inherited by every command this process starts)
    assert signal.getsignal(signal.SIGINT) is before

    def error_of(call):
        try:
            call()
        except Exception:
            return sys.exc_info()
        raise AssertionError("no error")

    lock = synchronize.Lock.__new__(synchronize.Lock)
    # a semaphore's state as a pickled Lock carries it, its name never created (or unlinked)
    gone = error_of(lambda: lock.__setstate__((0, 1, 1, "/rewardhouse-test-no-such-semaphore")))
    assert gone[0] is FileNotFoundError
    other = error_of(lambda: open("/no/such/file/anywhere"))
    for exc, quiet in ((gone, True), (other, False)):
        seen = io.StringIO()
        with redirect_stderr(seen):
            pool_warm.quiet_lost_pool(*exc, _previous=lambda k, v, tb: print("Traceback", k.__name__, file=sys.stderr))
        assert (seen.getvalue() == "") is quiet, seen.getvalue()


def test_ctrl_c_twice_while_the_pool_winds_down_ends_it_at_once(tmp_path):
    """A second Ctrl-C 30 ms after the first, while the hashing pool is being wound down: the
    command still ends within seconds with exit 130 and leaves nothing running (it used to wait
    forever at exit for workers the second interrupt had left without their stop)."""
    import os
    import signal
    import subprocess
    import time

    from pipeline.dedupe.hashing import SMALL_BATCH

    d, cli = _pool_sized_folder(tmp_path, SMALL_BATCH + 80, (320, 240))
    for delay in (0.4, 0.5, 0.6, 0.9, 1.2):
        with _ctrl_c_reaches_children():
            p = subprocess.Popen([str(cli), "dedupe", str(d)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True, start_new_session=True)
        time.sleep(delay)
        for _ in range(2):
            try:
                os.killpg(p.pid, signal.SIGINT)
            except ProcessLookupError:  # it had finished
                break
            time.sleep(0.03)
        _, err = p.communicate(timeout=30)
        assert p.returncode in (0, 130), (delay, p.returncode, err[-2000:])
        # a worker forked while the pool was torn down finds its semaphores gone: no traceback for it
        assert "Traceback" not in err, (delay, err[-2000:])
        if p.returncode == 130:
            assert err.strip().splitlines()[-1] == "rewardhouse: interrupted", (delay, err[-2000:])
        _group_ends(p.pid, f"the interrupted run (delay {delay})")
