"""Dedupe quality on generated look-alikes, with the rule chosen on one half and reported on the other.

Five generated sets, none committed:

  figures  figureset.py: charts (pie, bar, grouped bar, line, scatter, FigureQA- and DVQA-style),
           tables, geometry diagrams, text pages, slides and form screenshots, drawn with matplotlib
           (a few kinds with Pillow) in families of look-alikes: one template (size, palette,
           fonts, layout, labels) drawn many times with other data, so that two figures of a family
           differ only where the data differ. About a third get 1-3 edited copies (edits.py).
  photos   photoset.py: Debian wallpapers and scikit-image's sample photos, large pictures cut
           into tiles, scaled to widths of 320..4000 px, with 1-5 edited copies each, among them a
           full-width caption bar and a corner box of a fixed pixel size.
  plain    plainset.py: pictures of a few plain areas (flags, two-tone grounds, a disc, an icon or
           a ring on a ground, stripes, a gradient), one family per kind with other colours and
           positions, half with two edited copies; split by kind; reported, never tuned on.
  modest   modestset.py: a second generator, written apart from figureset.py (Pillow, other layouts,
           palettes and fonts): 16 kinds of figures in families whose figures differ a little (a bar or
           two, a few table cells or line points, a word), with its own edits; reported, never tuned on.
  scale    figureset.py --scale: N/2 pies of one template and N/2 bar charts of one template, no
           copies: every pair is a false pair, so an engine should find no cluster.

Each of figures and photos is split into a tuning half and a held-back half that share no family:
figures by kind and template (some kinds are tuning-only, some held back whole, the others
alternate their templates), photos by picture. Every edit occurs in both halves (about --per-edit
copies per edit per half). The plain set splits by kind too (plainset.py), and the modest set by
seed (modestset.py), but none of their halves takes part in the rule search.

The rule is chosen on the tuning halves only: each half is hashed once
(pipeline.dedupe.hashing.hash_files) and the engine (pipeline.dedupe.folder.dedupe_folder) is run
on the tuning halves with every rule of pipeline.dedupe.verify.tuning_grid(). Among the rules with
precision >= MIN_PRECISION on both tuning halves (figures and photos), only those whose mean F1 over
the halves is within F1_MARGIN (about one standard error of a half's F1) of the best compete (the
one-standard-error rule): of those at least as good as verify.DEFAULT_RULE in every half's
precision and recall, and better in one by more than that measure's standard error, the best mean
F1; when there is none, the one closest to DEFAULT_RULE (a difference within the noise is no reason
to move). Then both halves are
reported for the chosen rule and for DEFAULT_RULE, and the run says whether the default is the rule
the tuning halves chose (it should be: the shipped default is meant to be that rule).

imagededup's PHash runs beside it (in .bench-venv, built by bench_hashing.peer_python on first use;
its torch import is paid before the clock) at its default threshold 10 and at the threshold in
0..16 with the best F1 on the tuning half, reported on the held-back half as well.

Scoring is pairwise: a predicted pair is any two files in one predicted cluster (ours) or a pair
that imagededup's find_duplicates lists (edges, not closed into clusters); a true pair is two files
of one base (a figure or photo and its copies). False pairs are sorted by what their two bases
share: a near family (figureset's one reference with small changes), a template (figures) or
picture (photo tiles), a kind (figures) or source (photos), or nothing. Recall per edit: an edited
copy is found when it is paired with its base. Seconds: ours, hashing the half (once) plus one run
of the engine; imagededup, encode_images plus find_duplicates at that threshold. The worst false
clusters (most false pairs) are listed with each file's family, edit, and the engine's kind and
score, to be looked at.

    python tests/benchmarks/bench_dedupe_quality.py [--figures 800] [--photos 300] [--scale 2000]
        [--plain 60] [--seed 7] [--sets figures,photos,plain,modest,scale] [--per-edit 32] [--keep DIR] [--quick]
        [--no-tuning] [--jobs N]

--keep DIR builds the sets in DIR and leaves them there; a later run with the same DIR and the same
sizes and seed reuses them. --quick: small sets (a smoke test, numbers not meaningful).
--no-tuning: DEFAULT_RULE only. --jobs: processes for the rule search (default: every core).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))
import pipeline  # noqa: E402,F401  (its process settings, before NumPy loads, as in every rewardhouse process)

import modestset  # noqa: E402
import photoset  # noqa: E402
import plainset  # noqa: E402
from bench_hashing import peer_python  # noqa: E402

MAX_THRESHOLD = 16  # imagededup thresholds scanned: 0..16
DEFAULT_THRESHOLD = 10  # imagededup's default max_distance_threshold
MIN_PRECISION = 0.99  # a rule must reach this on every tuning half to be chosen
# About one standard error of a tuning half's F1 (sqrt(F1 (1 - F1) / n) with F1 ~ 0.93 and n ~ 500
# true pairs): rules closer than this to the best mean F1 are not told apart by it.
F1_MARGIN = 0.01
HALVES = ("tuning", "held_back")
SETS = ("figures", "photos", "plain", "modest", "scale")
WORST_CLUSTERS = 4  # false clusters printed per set and rule
WORST_MEMBERS = 6  # files printed per false cluster


# ---- the sets on disk ------------------------------------------------------------------------------


@dataclass
class Half:
    """One folder of files with their ground truth: rel path -> {"figure", "edit", "family", "kind",
    "half", "near"?} (see figureset.py and photoset.py)."""

    name: str  # e.g. "figures, tuning half"
    root: Path
    files: dict[str, dict]
    hashed: list | None = None
    hash_seconds: float = 0.0
    peer: dict | None = None  # imagededup's output for the folder
    found: dict = field(default_factory=dict)  # label -> FolderDedupe rows


def _version(*sources: str) -> str:
    """A digest of the generator's source: a kept set is rebuilt when it changes."""
    import hashlib

    return hashlib.sha256(b"".join((HERE / f).read_bytes() for f in sources)).hexdigest()[:16]


def _reuse(out: Path, params: dict) -> dict | None:
    done = out / "params.json"
    if done.exists() and json.loads(done.read_text()) == params and (out / "manifest.json").exists():
        return json.loads((out / "manifest.json").read_text())["files"]
    return None


def _finish(out: Path, params: dict, files: dict) -> None:
    if not (out / "manifest.json").exists():
        (out / "manifest.json").write_text(json.dumps({"files": files}, indent=1, sort_keys=True))
    (out / "params.json").write_text(json.dumps(params))


def _halves(set_name: str, out: Path, files: dict, halves=HALVES) -> list[Half]:
    return [Half(f"{set_name}, {h.replace('_', '-')} half" if h in HALVES else set_name, out / h,
                 {rel.split("/", 1)[1]: info for rel, info in files.items() if info["half"] == h}) for h in halves]


def _figureset(python: Path, out: Path, *args: str) -> dict:
    cmd = [str(python), str(HERE / "figureset.py"), str(out), *args, "--workers", str(min(_cores(), 4))]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"figureset.py failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
    return json.loads((out / "manifest.json").read_text())["files"]


def _built(out: Path, params: dict, make) -> tuple[dict, bool]:
    """The set kept in `out` when it was built with `params`; else `make()` builds it there again
    (out emptied first). Returns (files, reused)."""
    files = _reuse(out, params)
    if files is not None:
        return files, True
    if out.exists():
        shutil.rmtree(out)
    files = make()
    _finish(out, params, files)
    return files, False


def build_figures(out: Path, python: Path, figures: int, seed: int, per_edit: int) -> tuple[list[Half], bool]:
    params = {"figures": figures, "seed": seed, "per_edit": per_edit, "version": _version("figureset.py", "edits.py")}
    files, reused = _built(out, params, lambda: _figureset(python, out, "--seed", str(seed), "--figures", str(figures),
                                                           "--per-edit", str(per_edit)))
    return _halves("figures", out, files), reused


def build_scale(out: Path, python: Path, n: int, seed: int) -> tuple[Half, bool]:
    params = {"scale": n, "seed": seed, "version": _version("figureset.py", "edits.py")}
    files, reused = _built(out, params, lambda: _figureset(python, out, "--seed", str(seed), "--scale", str(n // 2)))
    return _halves(f"scale: {n // 2} pies of one template + {n // 2} bar charts of one template", out, files,
                   ("scale",))[0], reused


def build_photos(out: Path, bases: int, seed: int, per_edit: int) -> tuple[list[Half], bool]:
    params = {"photos": bases, "seed": seed, "per_edit": per_edit, "version": _version("photoset.py", "edits.py")}

    def make() -> dict:
        out.mkdir(parents=True)
        return photoset.build(out, bases, seed, per_edit=per_edit, workers=min(_cores(), 4),
                              log=lambda line: print(line, flush=True))

    files, reused = _built(out, params, make)
    return _halves("photos", out, files), reused


def build_plain(out: Path, per_kind: int, seed: int) -> tuple[list[Half], bool]:
    params = {"plain": per_kind, "seed": seed, "version": _version("plainset.py")}
    files, reused = _built(out, params, lambda: plainset.build(out, per_kind, seed))
    return _halves("plain", out, files), reused


def build_modest(out: Path, seed: int) -> tuple[list[Half], bool]:
    params = {"modest": seed, "version": _version("modestset.py")}
    files, reused = _built(out, params, lambda: modestset.build(out, seed))
    return _halves("modest", out, files), reused


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def describe(h: Half) -> str:
    bases = {i["figure"] for i in h.files.values()}
    families = {i["family"] for i in h.files.values()}
    copies = sum(1 for i in h.files.values() if i["edit"])
    kinds = sorted({i["kind"] for i in h.files.values()})
    return (f"{len(h.files)} files: {len(bases)} bases in {len(families)} families/pictures, {copies} edited copies; "
            f"kinds: {', '.join(kinds)}")


# ---- scoring ----------------------------------------------------------------------------------------------


def truth(files: dict[str, dict]) -> set[frozenset]:
    by_base = defaultdict(list)
    for name, info in files.items():
        by_base[info["figure"]].append(name)
    return {frozenset(p) for members in by_base.values() for p in itertools.combinations(sorted(members), 2)}


def shared(a: dict, b: dict) -> str:
    if a["family"] == b["family"]:
        return "near" if a.get("near") else "template"
    return "kind" if a["kind"] == b["kind"] else "nothing"


def score_pairs(predicted: set[frozenset], files: dict[str, dict], true: set[frozenset] | None = None) -> dict:
    true = truth(files) if true is None else true
    hit = predicted & true
    precision = len(hit) / len(predicted) if predicted else 1.0
    recall = len(hit) / len(true) if true else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    base_file = {i["figure"]: n for n, i in files.items() if not i["edit"]}
    per_edit = defaultdict(lambda: [0, 0])
    for name, info in files.items():
        if info["edit"]:
            per_edit[info["edit"]][1] += 1
            per_edit[info["edit"]][0] += frozenset((name, base_file[info["figure"]])) in predicted
    false = predicted - true
    false_by = Counter(shared(files[a], files[b]) for a, b in map(sorted, false))
    false_kinds = Counter(files[a]["kind"] if files[a]["kind"] == files[b]["kind"] else "(mixed)"
                          for a, b in map(sorted, false))
    return {"precision": precision, "recall": recall, "f1": f1, "pairs": len(predicted), "true": len(true),
            "false": len(false),
            "false_by": false_by, "false_kinds": false_kinds, "per_edit": {e: tuple(v) for e, v in per_edit.items()}}


def clusters_of(rows) -> dict[str, list[tuple]]:
    out = defaultdict(list)
    for row in rows:
        out[row[1]].append(row)
    return out


def cluster_pairs(rows) -> set[frozenset]:
    return {frozenset(p) for members in clusters_of(rows).values()
            for p in itertools.combinations(sorted(r[0] for r in members), 2)}


def edge_pairs(duplicates: dict[str, list[str]]) -> set[frozenset]:
    """imagededup's find_duplicates result as predicted pairs: each listed pair, no transitive closure."""
    return {frozenset((a, b)) for a, listed in duplicates.items() for b in listed if a != b}


# ---- our engine -----------------------------------------------------------------------------------------------


def engine_api():
    """(dedupe_folder, hash_files, verify module, whether dedupe_folder takes rule= and hashed=)."""
    from pipeline.dedupe import verify
    from pipeline.dedupe.folder import dedupe_folder
    from pipeline.dedupe.hashing import hash_files

    params = inspect.signature(dedupe_folder).parameters
    return dedupe_folder, hash_files, verify, "rule" in params, "hashed" in params


def hash_half(h: Half) -> None:
    dedupe_folder, hash_files, _, _, takes_hashed = engine_api()
    if not takes_hashed:
        return  # dedupe_folder hashes the folder on every call
    start = time.perf_counter()
    h.hashed = hash_files([(rel, h.root / rel) for rel in sorted(h.files)])
    h.hash_seconds = time.perf_counter() - start
    failed = [x for x in h.hashed if x.error]
    if failed:
        print(f"  {h.name}: {len(failed)} file(s) could not be hashed, e.g. {failed[0].key}: {failed[0].error}")


def run_ours(h: Half, rule) -> tuple[list[tuple], float]:
    """FolderDedupe.rows of the half under `rule` (None: the engine's default), and seconds
    (hashing, done once per half, plus the engine)."""
    dedupe_folder, _, _, takes_rule, takes_hashed = engine_api()
    kwargs = {}
    if takes_rule and rule is not None:
        kwargs["rule"] = rule
    if takes_hashed and h.hashed is not None:
        kwargs["hashed"] = h.hashed
    start = time.perf_counter()
    result = dedupe_folder(h.root, **kwargs)
    seconds = time.perf_counter() - start
    if result.errors and not takes_hashed:
        print(f"  {h.name}: {len(result.errors)} file(s) failed, e.g. {result.errors[0]}")
    return result.rows, seconds + h.hash_seconds


def rules() -> tuple[list, object, str]:
    """(the candidate rules, the default rule, a note)."""
    _, _, verify, takes_rule, _ = engine_api()
    default = getattr(verify, "DEFAULT_RULE", None)
    grid = list(getattr(verify, "tuning_grid", lambda: [None])()) if takes_rule else [None]
    note = ""
    if default is not None and default not in grid:
        grid.insert(0, default)
        note = "verify.tuning_grid() does not hold DEFAULT_RULE; it was added to the candidates"
    if default is None or not takes_rule:
        note = "the engine has no Rule/tuning_grid/dedupe_folder(rule=) yet: only its defaults are measured"
    return grid, default, note


def rule_changes(rule, default) -> str:
    """The fields in which a rule differs from the default, e.g. 'luma_tol=12.0 region_max=0.25'."""
    if rule is None or default is None:
        return "defaults"
    changed = [f"{f.name}={getattr(rule, f.name)}" for f in dataclasses.fields(rule)
               if getattr(rule, f.name) != getattr(default, f.name)]
    return " ".join(changed) or "DEFAULT_RULE"


def distance_to(rule, default) -> tuple[int, float]:
    """How far a rule is from the default: fields changed, then the sum of relative changes."""
    if rule is None or default is None:
        return 0, 0.0
    n, rel = 0, 0.0
    for f in dataclasses.fields(rule):
        a, b = getattr(rule, f.name), getattr(default, f.name)
        if a != b:
            n += 1
            try:
                rel += abs(a - b) / max(abs(b), 1e-9)
            except TypeError:
                rel += 1.0
    return n, rel


_GRID: list = []  # for the forked workers of choose()
_TUNING: list[Half] = []


def _grid_job(job: tuple[int, int]) -> tuple[int, int, dict, float]:
    i, k = job
    rows, seconds = run_ours(_TUNING[k], _GRID[i])
    return i, k, score_pairs(cluster_pairs(rows), _TUNING[k].files), seconds - _TUNING[k].hash_seconds


def _standard_error(share: float, n: int) -> float:
    """One standard error of a share measured on n pairs (binomial), at least one pair's worth."""
    return max(math.sqrt(share * (1.0 - share) / n), 1.0 / n) if n else 1.0


def _dominates(these: list[dict], those: list[dict]) -> bool:
    """At least as good in every half's precision and recall, and better in one by more than its
    standard error (a precision over `those`' predicted pairs, a recall over the true pairs): a
    gain of one pair in hundreds is the noise of the measure, not a better rule."""
    pairs = [(a[m], b[m], b["pairs" if m == "precision" else "true"]) for a, b in zip(these, those)
             for m in ("precision", "recall")]
    return all(x >= y for x, y, _ in pairs) and any(x - y > _standard_error(y, n) for x, y, n in pairs)


def choose(grid: list, default, tuning: list[Half], jobs: int) -> tuple[object, dict, str]:
    """Runs every rule on the tuning halves (in `jobs` processes); returns (chosen rule,
    rule -> [score per half], how)."""
    global _GRID, _TUNING
    _GRID, _TUNING = grid, tuning
    todo = [(i, k) for i in range(len(grid)) for k in range(len(tuning))]
    scores = {i: [None] * len(tuning) for i in range(len(grid))}
    engine_seconds = 0.0
    start = time.perf_counter()

    def collect(done) -> None:
        nonlocal engine_seconds
        for n, (i, k, s, secs) in enumerate(done, 1):
            scores[i][k] = s
            engine_seconds += secs
            if n % 10 == 0 and n < len(todo):
                print(f"  rule search: {n}/{len(todo)} runs, {time.perf_counter() - start:.0f}s", flush=True)

    if jobs > 1:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            collect(pool.imap_unordered(_grid_job, todo))
    else:
        collect(map(_grid_job, todo))
    _GRID, _TUNING = [], []
    mean_f1 = {i: sum(s["f1"] for s in ss) / len(ss) for i, ss in scores.items()}
    ok = [i for i, ss in scores.items() if all(s["precision"] >= MIN_PRECISION for s in ss)]
    if ok:
        # the one-standard-error rule: a difference in mean F1 smaller than the measure's noise is no
        # reason to move; among the rules within F1_MARGIN of the best, those at least as good as the
        # default in every half's precision and recall (and better somewhere by more than a standard
        # error: _dominates) compete on mean F1,
        # and when there is none the one closest to the default stands
        top = max(mean_f1[i] for i in ok)
        near = [i for i in ok if mean_f1[i] >= top - F1_MARGIN]
        base = next((i for i in near if grid[i] == default), None)
        better = [i for i in near if base is not None and i != base and _dominates(scores[i], scores[base])]
        if better:
            best = max(better, key=lambda i: (round(mean_f1[i], 6), tuple(-x for x in distance_to(grid[i], default))))
            pick = "the best mean F1 of those at least as good as DEFAULT_RULE in every half's precision and recall"
        else:
            best = min(near, key=lambda i: (distance_to(grid[i], default), -mean_f1[i]))
            pick = "none is at least as good as DEFAULT_RULE everywhere: the closest to it"
        how = (f"of the {len(ok)} of {len(grid)} rules with precision >= {MIN_PRECISION} on every tuning half, the "
               f"{len(near)} within {F1_MARGIN} of the best mean F1 ({top:.3f}); of those, {pick}")
    else:
        best = max(scores, key=lambda i: (min(s["precision"] for s in scores[i]), round(mean_f1[i], 6),
                                          tuple(-x for x in distance_to(grid[i], default))))
        how = f"no rule reaches precision {MIN_PRECISION} on every tuning half: the rule with the best lowest precision"
    print(f"\nrules tried on the tuning halves, best mean F1 first:")
    print(f"  {'rule (fields that differ from DEFAULT_RULE)':<58} "
          + "   ".join(f"{h.name.split(',')[0] + ' P / R / F1':<17}" for h in tuning) + "   mean F1")
    order = sorted(scores, key=lambda i: -mean_f1[i])
    for i in order:
        mark = ("<- chosen" if i == best else "") + (" (DEFAULT_RULE)" if grid[i] == default and default is not None else "")
        cells = "   ".join(f"{s['precision']:.3f} {s['recall']:.3f} {s['f1']:.3f}" for s in scores[i])
        print(f"  {rule_changes(grid[i], default):<58} {cells}   {mean_f1[i]:.3f} {'*' if i in ok else ' '} {mark}")
    print(f"  * precision >= {MIN_PRECISION} on every tuning half; chosen: {how}")
    print(f"  engine: {engine_seconds / max(len(todo), 1):.1f}s a run on average ({len(todo)} runs)")
    return grid[best], {grid[i]: scores[i] for i in scores}, how


# ---- imagededup ---------------------------------------------------------------------------------------------------


IMAGEDEDUP_CHILD = """
import json, sys, time
from imagededup.methods import PHash          # imports torch: paid before the clock
workers, jobs = int(sys.argv[1]), json.loads(sys.argv[2])  # [[folder, [thresholds]], ...]
encoder = PHash(verbose=False)
out = {}
for folder, thresholds in jobs:
    start = time.perf_counter()
    encodings = encoder.encode_images(image_dir=folder, num_enc_workers=workers)
    res = {"encode_seconds": time.perf_counter() - start, "encoded": len(encodings), "find_seconds": {},
           "duplicates": {}}
    for t in thresholds:
        start = time.perf_counter()
        res["duplicates"][t] = encoder.find_duplicates(encoding_map=encodings, max_distance_threshold=t,
                                                       num_dist_workers=workers)
        res["find_seconds"][t] = time.perf_counter() - start
    out[folder] = res
print(json.dumps(out))
"""


def run_imagededup(halves: list[Half], scale: Half | None = None) -> str:
    """Fills each half's .peer (thresholds 0..MAX_THRESHOLD; the scale set's at DEFAULT_THRESHOLD
    only); returns why not, or ''."""
    python, why = peer_python()
    if python is None:
        return why
    jobs = [[str(h.root), list(range(MAX_THRESHOLD + 1))] for h in halves]
    if scale is not None:
        jobs.append([str(scale.root), [DEFAULT_THRESHOLD]])
        halves = [*halves, scale]
    out = subprocess.run([str(python), "-c", IMAGEDEDUP_CHILD, str(_cores()), json.dumps(jobs)],
                         capture_output=True, text=True, check=False)
    if out.returncode:
        return f"run failed: {(out.stderr.strip().splitlines() or ['no output'])[-1]}"
    result = json.loads(out.stdout.strip().splitlines()[-1])
    for h in halves:
        r = result[str(h.root)]
        r["duplicates"] = {int(t): d for t, d in r["duplicates"].items()}
        r["find_seconds"] = {int(t): s for t, s in r["find_seconds"].items()}
        r["scores"] = {t: score_pairs(edge_pairs(d), h.files) for t, d in r["duplicates"].items()}
        h.peer = r
    return ""


# ---- report -------------------------------------------------------------------------------------------------------


def report(h: Half, rows: list[tuple[str, dict, float]], worst: list[tuple[str, list]]) -> None:
    print(f"\n{h.name}: {describe(h)}")
    print(f"  {'engine':<40} {'precision':>9} {'recall':>7} {'F1':>6} {'pairs':>6} {'false':>6} {'seconds':>8}   "
          f"false pairs sharing: near/template/kind/nothing")
    for label, s, secs in rows:
        f = s["false_by"]
        print(f"  {label:<40} {s['precision']:>9.3f} {s['recall']:>7.3f} {s['f1']:>6.3f} {s['pairs']:>6} {s['false']:>6} "
              f"{secs:>8.2f}   {f['near']:>4} / {f['template']:>4} / {f['kind']:>4} / {f['nothing']:>4}")
    edits = sorted({e for _, s, _ in rows for e in s["per_edit"]})
    if edits:
        heads = [short(label) for label, _, _ in rows]
        width = max(11, *(len(x) for x in heads))
        print("  recall per edit (copies paired with their base / copies):")
        print(f"    {'edit':<16}" + "".join(f"{x:>{width + 2}}" for x in heads))
        for e in edits:
            cells = "".join(f"{'{}/{}'.format(*s['per_edit'].get(e, (0, 0))):>{width + 2}}" for _, s, _ in rows)
            print(f"    {e:<16}{cells}")
    for label, s, _ in rows:
        if s["false"] and label.startswith("rewardhouse"):
            kinds = ", ".join(f"{k} {n}" for k, n in s["false_kinds"].most_common(8))
            print(f"  {label}: false pairs by kind/source: {kinds}")
    for label, clusters in worst:
        if not clusters:
            continue
        print(f"  worst false clusters, {label} (file, family, edit; engine's kind and score):")
        for members, n_false in clusters:
            bases = len({h.files[m[0]]["figure"] for m in members})
            print(f"    {len(members)} files of {bases} bases, {n_false} false pairs:")
            for m in members[:WORST_MEMBERS]:
                info = h.files[m[0]]
                score = "" if m[5] is None else f"{m[5]:.4f}"
                print(f"      {m[0]:<44} {info['family']:<40} {info['edit'] or '-':<15} {m[4] or 'canonical':<9} {score}")
            if len(members) > WORST_MEMBERS:
                print(f"      ... and {len(members) - WORST_MEMBERS} more")


def short(label: str) -> str:
    """A column head for an engine's row label."""
    if label.startswith("imagededup PHash "):
        return "imgdd " + label.split()[2]
    return {"rewardhouse (chosen rule)": "ours chosen", "rewardhouse (DEFAULT_RULE)": "ours default",
            "rewardhouse (chosen = DEFAULT_RULE)": "ours", "rewardhouse (defaults)": "ours"}.get(label, label)


def worst_clusters(h: Half, rows) -> list[tuple[list, int]]:
    out = []
    for members in clusters_of(rows).values():
        if len(members) < 2:
            continue
        by_base = Counter(h.files[m[0]]["figure"] for m in members)
        n = len(members)
        n_false = n * (n - 1) // 2 - sum(c * (c - 1) // 2 for c in by_base.values())
        if n_false:
            out.append((sorted(members, key=lambda m: (not m[2], m[0])), n_false))
    return sorted(out, key=lambda x: -x[1])[:WORST_CLUSTERS]


def engines(chosen, default, tuned: bool) -> list[tuple[str, object]]:
    """(label, rule) of the rules to report."""
    if default is None:
        return [("rewardhouse (defaults)", None)]
    if not tuned:
        return [("rewardhouse (DEFAULT_RULE)", default)]
    if chosen == default:
        return [("rewardhouse (chosen = DEFAULT_RULE)", default)]
    return [("rewardhouse (chosen rule)", chosen), ("rewardhouse (DEFAULT_RULE)", default)]


def evaluate_set(halves: list[Half], chosen, default, tuned: bool, peer_why: str) -> None:
    best_t = None
    for h in halves:
        rows, worst = [], []
        for label, rule in engines(chosen, default, tuned):
            found, secs = run_ours(h, rule)
            s = score_pairs(cluster_pairs(found), h.files)
            rows.append((label, s, secs))
            worst.append((label, worst_clusters(h, found)))
        if h.peer:
            scores = h.peer["scores"]
            if best_t is None:  # chosen on the tuning half, the first
                best_t = max(scores, key=lambda t: (scores[t]["f1"], -t))
            for label, t in ((f"imagededup PHash t={DEFAULT_THRESHOLD}", DEFAULT_THRESHOLD),
                             (f"imagededup PHash t={best_t} (tuned)", best_t)):
                rows.append((label, scores[t], h.peer["encode_seconds"] + h.peer["find_seconds"][t]))
        report(h, rows, worst)
        if h.peer:
            f1s = " ".join(f"{t}:{s['f1']:.3f}" for t, s in sorted(h.peer["scores"].items()))
            print(f"  imagededup F1 by threshold: {f1s}")
            if h.peer["encoded"] < len(h.files):
                print(f"  imagededup encoded {h.peer['encoded']} of {len(h.files)} files")
        elif peer_why:
            print(f"  imagededup peer unavailable: {peer_why}")
    if best_t is not None:
        print(f"  (imagededup's threshold t={best_t} has the best F1 on the tuning half; its PHash thresholds at the "
              "median, so distances are even: an odd t acts as t-1)")


def evaluate_scale(h: Half, chosen, default, tuned: bool) -> None:
    print(f"\n{h.name}: {len(h.files)} files, every pair a false pair")
    for label, rule in engines(chosen, default, tuned):
        found, secs = run_ours(h, rule)
        clusters = [m for m in clusters_of(found).values() if len(m) > 1]
        pairs = cluster_pairs(found)
        per_family = Counter(h.files[m[0][0]]["family"] for m in clusters)
        fams = ", ".join(f"{f} {n}" for f, n in sorted(per_family.items())) or "-"
        print(f"  {label}: {len(clusters)} clusters ({fams}), {len(pairs)} false pairs, {secs:.2f} s "
              f"(hashing {h.hash_seconds:.2f} s)")
        for members, n_false in worst_clusters(h, found)[:2]:
            print(f"    e.g. {len(members)} files: " + ", ".join(f"{m[0]} ({m[4] or 'canonical'}"
                                                                  f"{'' if m[5] is None else f' {m[5]:.4f}'})"
                                                                  for m in members[:4]))
    if h.peer:
        s = h.peer["scores"][DEFAULT_THRESHOLD]
        print(f"  imagededup PHash t={DEFAULT_THRESHOLD}: {s['pairs']} false pairs, "
              f"{h.peer['encode_seconds'] + h.peer['find_seconds'][DEFAULT_THRESHOLD]:.2f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figures", type=int, default=800)
    parser.add_argument("--photos", type=int, default=300, help="at most this many base photos (tiles)")
    parser.add_argument("--scale", type=int, default=2000, help="figures in the scale check (half pies, half bars)")
    parser.add_argument("--plain", type=int, default=60, help="bases per kind in the plain set")
    parser.add_argument("--per-edit", type=int, default=32, help="edited copies per edit per half")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sets", default=",".join(SETS), help=f"comma-separated: {', '.join(SETS)}")
    parser.add_argument("--keep", type=Path, help="build the sets here, keep them, reuse them when the options match")
    parser.add_argument("--quick", action="store_true", help="small sets: a smoke test")
    parser.add_argument("--no-tuning", action="store_true", help="report DEFAULT_RULE only, no rule search")
    parser.add_argument("--jobs", type=int, default=_cores(), help="processes for the rule search (default: every core)")
    args = parser.parse_args()
    if args.quick:
        args.figures, args.photos, args.scale, args.per_edit, args.plain = 240, 60, 400, 10, 15
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = set(sets) - set(SETS)
    if unknown:
        parser.error(f"unknown set(s): {', '.join(sorted(unknown))}")
    started = time.perf_counter()
    tmp = None
    if args.keep:
        top = args.keep.resolve()
        top.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="rewardhouse-dq-")
        top = Path(tmp.name)
    try:
        return _run(args, sets, top, started)
    finally:
        if tmp is not None:
            tmp.cleanup()


def _run(args, sets: list[str], top: Path, started: float) -> int:
    python, why = (None, "")
    if "figures" in sets or "scale" in sets:
        python, why = peer_python()
        if python is None:
            print(f"figures and scale skipped: they are drawn by .bench-venv's matplotlib, which is unavailable: {why}")
            sets = [s for s in sets if s in ("photos", "plain", "modest")]
    built: dict[str, list[Half]] = {}
    for which in sets:
        t = time.perf_counter()
        if which == "figures":
            built[which], reused = build_figures(top / "figures", python, args.figures, args.seed, args.per_edit)
        elif which == "photos":
            print("photos: building the set", flush=True)
            built[which], reused = build_photos(top / "photos", args.photos, args.seed, args.per_edit)
        elif which == "plain":
            built[which], reused = build_plain(top / "plain", args.plain, args.seed)
        elif which == "modest":
            built[which], reused = build_modest(top / "modest", args.seed)
        else:
            half, reused = build_scale(top / "scale", python, args.scale, args.seed)
            built[which] = [half]
        print(f"{which}: {'reused' if reused else 'built'} in {time.perf_counter() - t:.1f}s: "
              + "; ".join(f"{h.name.split(', ')[-1]} {len(h.files)} files" for h in built[which]), flush=True)
    halves = [h for hs in built.values() for h in hs]
    t = time.perf_counter()
    for h in halves:
        hash_half(h)
    print(f"hashed every half once in {time.perf_counter() - t:.1f}s", flush=True)

    grid, default, note = rules()
    if note:
        print(f"note: {note}")
    tuning = [built[s][0] for s in ("figures", "photos") if s in built]
    t = time.perf_counter()
    if args.no_tuning:
        grid = [default]
        print("tuning skipped (--no-tuning): DEFAULT_RULE only")
    tuned = bool(tuning) and len(grid) > 1
    if tuned:
        chosen, _, _ = choose(grid, default, tuning, args.jobs)
        print(f"  ({len(grid)} rules x {len(tuning)} tuning halves in {time.perf_counter() - t:.1f}s, "
              f"{args.jobs} process(es))")
    else:
        chosen = default
    if default is not None and tuned:
        same = chosen == default
        print(f"\nchosen rule: {rule_changes(chosen, default)}")
        print("DEFAULT_RULE IS the rule the tuning halves chose" if same else
              f"DEFAULT_RULE is NOT the rule the tuning halves chose (default: {default}; chosen: {chosen})")

    t = time.perf_counter()
    folders = [h for which in ("figures", "photos", "plain", "modest") for h in built.get(which, [])]
    scale = built["scale"][0] if "scale" in built else None
    peer_why = run_imagededup(folders, scale) if halves else ""
    print(f"imagededup over {len(halves)} folder(s) in {time.perf_counter() - t:.1f}s (torch import included)"
          + (f": {peer_why}" if peer_why else ""))
    for which in ("figures", "photos", "plain", "modest"):
        if which in built:
            evaluate_set(built[which], chosen, default, tuned, peer_why)
    if "scale" in built:
        evaluate_scale(built["scale"][0], chosen, default, tuned)
    print(f"\nwhole run: {time.perf_counter() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
