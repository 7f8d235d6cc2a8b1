"""Reviewer overrides of dedupe and leak decisions: a small versioned JSON file in the data root.

    {"format": 1, "revision": 3, "decisions": [
        {"decision": "not_duplicates", "images": ["mmrb2:images/a.png", "visualprm:geo/b.png"],
         "reason": "same template, different figure", "by": "ana", "at": "2026-12-01T12:00:00Z"},
        {"decision": "not_leak", "train": "visualprm:geo/b.png", "eval": "mmrb2:images/a.png", ...},
        {"decision": "not_leak", "of": "text", "train": "visualprm:geo_00012_0", "eval": "vlrb:pair_77", ...},
        {"decision": "duplicates", "images": ["sha256:<hex>", "visualprm:geo/c.png"], ...}]}

- `not_duplicates`: the two images are never a pair (verification's acceptance is overruled, so
  they never share a cluster or a contamination row); identical bytes cannot be told apart and
  are reported as not applicable.
- `not_leak`: the train image is not a copy of an eval image: its `contamination` rows (with that
  eval image only, when `eval` is given) are dropped, so its samples go back into the export.
- `not_leak` with `"of": "text"`: the train *record*'s text is not a copy of the eval record's
  (of any eval record's, without `eval`): the text link of its `record_contamination` rows is
  dropped (pipeline/decontam/overrides.py); a link by pictures stays. `of` is written only for
  text, so files and digests from before it are unchanged.
- `duplicates`: the two images are an accepted pair (kind `override`) even if the search or
  verification missed them.

An image is named `<dataset>:<image_key>` (as in `duplicate_clusters`) or `sha256:<hex>` (its
bytes, whatever the dataset); a record is named `<dataset>:<record key>` (as in
`record_contamination`: `visualprm:<sample_id>`, `vlrb:<pair_id>`, `mmrb2:<pair_id>`). `revision`
counts the edits the CLI made. A run reads the file once (the dedupe step) and hands the digest of
the decisions it applied on to the release id, so a changed file makes a new release, from the
next run on. Plain Python, no Dagster.
"""

from __future__ import annotations

import gc
import getpass
import hashlib
import json
import os
import stat
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

FORMAT = 1
FILE_NAME = "overrides.json"
DECISIONS = ("not_duplicates", "not_leak", "duplicates")
LEAK_OF = ("image", "text")  # what a not_leak decision is about (`of`; image when absent)


class OverridesError(ValueError):
    """The overrides file cannot be used: the message names the file and the entry."""


def unusable_overrides(exc: OverridesError) -> str:
    """The one line a run stops with, before it starts or in the step that reads the file."""
    return f"reviewers' overrides cannot be used: {exc}; fix or move the file, then run again"


@dataclass(frozen=True)
class Decision:
    decision: str
    images: tuple[str, ...]  # not_duplicates / duplicates: two refs; not_leak: (train,) or (train, eval)
    reason: str = ""
    by: str = ""
    at: str = ""
    of: str = "image"  # image | text: text only for a not_leak about records' texts (`images` name records)

    def to_json(self) -> dict:
        out: dict = {"decision": self.decision}
        if self.of != "image":
            out["of"] = self.of
        if self.decision == "not_leak":
            out["train"] = self.images[0]
            if len(self.images) > 1:
                out["eval"] = self.images[1]
        else:
            out["images"] = list(self.images)
        return {**out, "reason": self.reason, "by": self.by, "at": self.at}

    @property
    def label(self) -> str:
        if self.of == "text":
            return f"not a text leak: {self.images[0]}" + (f" (against {self.images[1]})" if len(self.images) > 1 else "")
        if self.decision == "not_leak":
            return f"not a leak: {self.images[0]}" + (f" (against {self.images[1]})" if len(self.images) > 1 else "")
        verb = "not duplicates" if self.decision == "not_duplicates" else "always duplicates"
        return f"{verb}: {self.images[0]} ↔ {self.images[1]}"


@dataclass
class Overrides:
    decisions: list[Decision] = field(default_factory=list)
    revision: int = 0
    path: str | None = None

    def __bool__(self) -> bool:
        return bool(self.decisions)

    def digest(self) -> str | None:
        """What the release id sees: the decisions' content (not their notes, times or revision)."""
        if not self.decisions:
            return None
        with collector_paused():
            # `of` counts only when it is not the default, so digests from before it are unchanged
            core = sorted([d.decision, *d.images] if d.of == "image" else [d.decision, f"of:{d.of}", *d.images]
                          for d in self.decisions)
            return hashlib.sha256(json.dumps(core).encode()).hexdigest()[:16]

    def of(self, decision: str, about: str | None = None) -> list[Decision]:
        """The decisions of that kind (`about`: only those whose `of` is image or text)."""
        return [d for d in self.decisions if d.decision == decision and (about is None or d.of == about)]

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "revision": self.revision,
                           "decisions": [d.to_json() for d in self.decisions]}, indent=2, ensure_ascii=False) + "\n"


@contextmanager
def collector_paused():
    """Pause Python's cycle collector while a file's worth of small objects is built: none of them
    form cycles, and the collector would otherwise rescan all of them again and again (more than
    twice the time of reading a file of 300,000 decisions)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _is_ref(value) -> bool:
    if not isinstance(value, str):
        return False
    colon = value.find(":")
    return 0 < colon < len(value) - 1


def _is_record(value) -> bool:
    return _is_ref(value) and not value.startswith("sha256:")  # a record has no bytes to name it by


def _kind(value) -> str:
    """A JSON value's kind as the file's author would name it."""
    return {dict: "an object", list: "a list", str: "text", bool: "true/false", type(None): "null"}.get(
        type(value), "a number")


def _shown(value) -> str:
    """A value as an error line quotes it: short and on one line."""
    text = repr(value) if isinstance(value, (str, int, float)) else ""
    return text if text and len(text) <= 80 else _kind(value)


def _text(entry: dict, name: str, where: str) -> str:
    value = entry.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise OverridesError(f"{where}: `{name}` must be text, got {_kind(value)}")
    return value


def _decision(entry, where: str) -> Decision:
    if not isinstance(entry, dict):
        raise OverridesError(f"{where}: a decision is an object, got {_kind(entry)}")
    kind = entry.get("decision")
    if kind not in DECISIONS:
        raise OverridesError(f"{where}: `decision` must be one of {', '.join(DECISIONS)} (got {_shown(kind)})")
    of = entry.get("of")
    if of is None:
        of = "image"
    if of not in LEAK_OF:
        raise OverridesError(f"{where}: `of` must be one of {', '.join(LEAK_OF)} (got {_shown(of)})")
    if of == "text" and kind != "not_leak":
        raise OverridesError(f"{where}: `of` text applies to not_leak only ({kind} is about images)")
    if kind == "not_leak":
        fields = ("train", "eval")
        images = [entry.get("train")] + ([entry["eval"]] if entry.get("eval") is not None else [])
    else:
        fields = ("images", "images")
        images = entry.get("images")
        if not isinstance(images, list) or len(images) != 2:
            raise OverridesError(f"{where}: {kind} names exactly two images in `images`")
    for field_name, ref in zip(fields, images):
        if of == "text" and not _is_record(ref):
            raise OverridesError(f"{where}: `{field_name}`: a record is named <dataset>:<record key> (got {_shown(ref)})")
        if not _is_ref(ref):
            raise OverridesError(f"{where}: `{field_name}`: an image is named <dataset>:<image_key> or sha256:<hex> "
                                 f"(got {_shown(ref)})")
    if kind != "not_leak" and images[0] == images[1]:
        raise OverridesError(f"{where}: {kind} names the same image twice ({_shown(images[0])})")
    return Decision(kind, tuple(images), _text(entry, "reason", where), _text(entry, "by", where),
                    _text(entry, "at", where), of)


def parse(text: str, where: str) -> Overrides:
    with collector_paused():
        return _parse(text, where)


def _parse(text: str, where: str) -> Overrides:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OverridesError(f"{where}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:  # Python's reader recurses once per level of nesting
        raise OverridesError(f"{where}: not usable JSON (nested too deeply)") from None
    except ValueError as exc:  # e.g. a number with more digits than Python converts
        raise OverridesError(f"{where}: not usable JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("decisions"), list):
        raise OverridesError(f"{where}: expected {{\"format\": {FORMAT}, \"revision\": N, \"decisions\": [...]}}")
    revision = doc.get("revision", 0)
    if revision is None:
        revision = 0
    if isinstance(revision, bool) or not isinstance(revision, int) or revision < 0:
        raise OverridesError(f"{where}: `revision` must be a whole number of 0 or more, got {_shown(revision)}")
    decisions = [_decision(e, f"{where} decision {i}") for i, e in enumerate(doc["decisions"], 1)]
    return Overrides(decisions, revision, where)


def read_text(path: str) -> str | None:
    """The file's text, or None when there is none (a local path or an s3:// URL). Something else
    in its place (a folder, a dangling link) or bytes that are not UTF-8 raise OverridesError:
    read as "no decisions", they would drop every decision without a word."""
    if path.startswith("s3://"):
        from pipeline.sources.objects import ObjectStoreError, read_object

        try:
            data = read_object(path)
        except ObjectStoreError as exc:  # a missing bucket is not "no decisions"
            raise OverridesError(str(exc)) from None
    else:
        p = Path(path)
        try:
            mode = p.stat().st_mode
        except FileNotFoundError:
            if p.is_symlink():
                raise OverridesError(f"{path}: a link to a file that does not exist") from None
            return None
        if not stat.S_ISREG(mode):
            what = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise OverridesError(f"{path}: {what}, not an overrides file")
        data = p.read_bytes()
    if data is None:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise OverridesError(f"{path}: not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x}); "
                             "save it as UTF-8") from None


def load(path: str | None) -> Overrides:
    """The decisions at `path`; no file means no decisions. A file that cannot be used raises
    OverridesError (the run stops with that line rather than ignore a reviewer)."""
    if not path:
        return Overrides()
    try:
        text = read_text(path)
    except OSError as exc:
        raise OverridesError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return Overrides(path=path) if text is None else parse(text, path)


def save(path: str, overrides: Overrides) -> None:
    """Write atomically (a temporary file renamed into place)."""
    if path.startswith("s3://"):
        from pipeline.sources.objects import ObjectStoreError, write_object

        try:
            write_object(path, overrides.to_json().encode())
        except ObjectStoreError as exc:
            raise OverridesError(str(exc)) from None
        return
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{uuid.uuid4().hex[:8]}")
    tmp.write_text(overrides.to_json(), encoding="utf-8")
    os.replace(tmp, p)


def add(path: str, decision: str, images: list[str], reason: str = "", by: str | None = None,
        of: str = "image") -> Overrides:
    """Record one decision (replacing an earlier one about the same images, or the same records for
    a text decision) and bump the revision. `of`: "text" for a not_leak about records' texts."""
    current = load(path)
    entry = {"decision": decision, "reason": reason}
    if of != "image":
        entry["of"] = of
    if decision == "not_leak":
        entry["train"] = images[0]
        if len(images) > 1:
            entry["eval"] = images[1]
    else:
        entry["images"] = images
    new = _decision(entry, path)
    try:
        who = by or getpass.getuser()
    except Exception:  # no user name in a container: leave it empty
        who = by or ""
    new = Decision(new.decision, new.images, reason, who, datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                   new.of)
    same = (new.of, frozenset(new.images))
    kept = [d for d in current.decisions if (d.of, frozenset(d.images)) != same]
    out = Overrides(kept + [new], current.revision + 1, path)
    save(path, out)
    return out


def remove(path: str, index: int) -> Overrides:
    """Drop decision number `index` (1-based, as `rewardhouse override list` shows)."""
    current = load(path)
    if not 1 <= index <= len(current.decisions):
        raise OverridesError(f"{path}: there is no decision {index} (it has {len(current.decisions)})")
    out = Overrides(current.decisions[:index - 1] + current.decisions[index:], current.revision + 1, path)
    save(path, out)
    return out
