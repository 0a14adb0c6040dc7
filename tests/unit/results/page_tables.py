"""Reading the results page's tables back: from report.md, from report.html (html.parser), and from the
DOM Debian's headless chromium builds of report.html (for the tests of the page)."""

from __future__ import annotations

import html.parser
import shutil
import subprocess
from pathlib import Path

from tests.support import require


class Tables(html.parser.HTMLParser):
    """Every ``<table>`` of a document as rows of cell texts (``th`` and ``td`` alike)."""

    def __init__(self):
        super().__init__()
        self.tables, self._cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append(self._cell)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def html_tables(text: str) -> list[list[list[str]]]:
    parser = Tables()
    parser.feed(text)
    return parser.tables


def md_table(md: str, heading: str) -> list[list[str]]:
    """The first Markdown table after ``heading``: header row then body rows (the ``|---`` line dropped)."""
    lines = md.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        if not line.startswith("|---"):
            rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return rows


def chromium_dom(page: Path, profile: Path) -> str:
    """The DOM headless chromium builds from ``page`` with the network off (``--dump-dom``)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    require(browser is not None, "Debian's chromium (apt-get install chromium) for the headless report.html test")
    proc = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={profile}", "--proxy-server=127.0.0.1:9",
                           "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout
