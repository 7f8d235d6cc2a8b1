"""The README and docs/ stay true to the repository: the command reference is the parser's, every
relative link lands on a file (and heading), the README stays short, and the make targets it
names exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline import cli_reference

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
README_MAX_LINES = 200

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`\n]*`")


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def outside_fences(text: str) -> list[str]:
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            kept.append(line)
    return kept


def prose(text: str) -> str:
    """The text outside code: fenced blocks and inline code spans hold examples, not links."""
    return "\n".join(INLINE_CODE.sub("", line) for line in outside_fences(text))


def code(text: str) -> str:
    """The text inside code: fenced blocks and inline code spans."""
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        kept += [line] if fenced else [span.strip("`") for span in INLINE_CODE.findall(line)]
    return "\n".join(kept)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation (backticks too)
    dropped, spaces to hyphens, a repeated heading numbered -1, -2, ..."""
    seen: dict[str, int] = {}
    found = set()
    for line in outside_fences(page.read_text(encoding="utf-8")):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if not heading:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1))
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return found


def make_targets() -> set[str]:
    targets = set()
    for line in (REPO / "Makefile").read_text(encoding="utf-8").splitlines():
        rule = re.match(r"^([A-Za-z0-9][\w.-]*)\s*:(?!=)", line)
        if rule:
            targets.add(rule.group(1))
    return targets


@pytest.mark.fast
def test_the_cli_reference_is_the_parsers():
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    if page != cli_reference.render():
        pytest.fail(f"docs/cli.md differs from the parser in pipeline/cli.py: regenerate it with "
                    f"`{cli_reference.REGENERATE}`", pytrace=False)


@pytest.mark.fast
def test_every_relative_link_lands_on_a_file_and_heading():
    broken = []
    for page in pages():
        for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...: not ours to check
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(REPO)}: {target}"
            if not linked.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{where} (no such heading in {linked.relative_to(REPO)})")
    assert not broken, "broken links:\n" + "\n".join(broken)


@pytest.mark.fast
def test_the_readme_is_short_and_links_every_docs_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in LINK.findall(prose("\n".join(lines)))}
    unlinked = [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


@pytest.mark.fast
def test_the_readme_names_only_make_targets_that_exist():
    text = README.read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![\w-])make ([a-z][\w-]*)", code(text)))
    assert "test" in named and any(line.startswith("make test ") for line in text.splitlines()), \
        "the README must keep its `make test` line (CI reads it)"
    assert named <= make_targets(), f"make targets the README names but the Makefile lacks: {sorted(named - make_targets())}"
