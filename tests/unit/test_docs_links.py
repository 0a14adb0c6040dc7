"""README.md is the entry point and docs/ holds one page per topic: every page is reachable from README,
and no relative link or image in either points at a file that does not exist.

A link is markdown's ``[text](target)`` or ``![alt](target)``; a target with a scheme (``https:``,
``mailto:``) or a bare ``#anchor`` is not a file and is left out; ``#anchor`` after a path is dropped
before the path is resolved against the linking file's folder.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _relative_links(page: Path) -> list[str]:
    """The link targets of one markdown file that name a file in the repository, without ``#anchor``."""
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # a link inside a code block is code, not a link
    targets = []
    for target in LINK.findall(text):
        if SCHEME.match(target) or target.startswith("#"):
            continue
        targets.append(target.split("#", 1)[0])
    return targets


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def test_the_link_pattern_finds_links_and_images_and_leaves_out_urls_and_anchors(tmp_path):
    page = tmp_path / "p.md"
    page.write_text('[a](docs/a.md) ![b](b.png "t") [c](https://x.org/c.md) [d](#d) [e](e.md#sec)\n'
                    "```\n[f](not-a-link.md)\n```\n", encoding="utf-8")
    assert _relative_links(page) == ["docs/a.md", "b.png", "e.md"]


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / target).resolve() for target in _relative_links(ROOT / "README.md")}
    pages = sorted(DOCS.glob("*.md"))
    assert pages, "docs/ holds no page"
    unlinked = [page.relative_to(ROOT).as_posix() for page in pages if page.resolve() not in linked]
    assert not unlinked, f"docs pages README.md does not link: {unlinked}"


def test_every_relative_link_in_readme_and_docs_names_an_existing_file():
    broken = []
    for page in _pages():
        for target in _relative_links(page):
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT).as_posix()}: {target}")
    assert not broken, f"links to missing files: {broken}"
