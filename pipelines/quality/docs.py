"""Data Docs per run: ``<root>/quality/data_docs/<run_id>/index.html`` and a ``latest`` link
(on an object-store root: built on local disk, uploaded there, and ``LATEST`` names the run).

GX's own index table is drawn in the browser by jQuery and bootstrap-table loaded from public
CDNs, so offline (CI, air-gapped clusters) it stays empty. The index therefore also gets a
static summary — each suite with its evaluated/passed/failed counts, its status and a link to
GX's validation page, which is static HTML — inserted at the top of the page.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from pipelines.quality.results import Outcome, summarize

SUMMARY_ID = "offsets-lakehouse-quality-summary"
_COLOURS = {"ok": "#d4edda", "warn": "#fff3cd", "failed": "#f8d7da"}


def docs_root(lakehouse_root: str) -> Path | None:
    """Where Data Docs go on a local root, or None for an object-store root (see :func:`docs_uri`)."""
    if "://" in lakehouse_root and not lakehouse_root.startswith("file://"):
        return None
    return Path(lakehouse_root.removeprefix("file://")) / "quality" / "data_docs"


def docs_uri(lakehouse_root: str) -> str:
    """Where Data Docs go, local or on a store: ``<root>/quality/data_docs``."""
    local = docs_root(lakehouse_root)
    return str(local) if local is not None else f"{lakehouse_root.rstrip('/')}/quality/data_docs"


def validation_pages(site: Path) -> dict[str, str]:
    """suite name -> path (relative to the site) of its latest validation page."""
    pages: dict[str, str] = {}
    for page in sorted((site / "validations").rglob("*.html")):
        rel = page.relative_to(site)
        parts = rel.parts  # validations/<layer>/<table>/<run>/<time>/<batch>.html
        if len(parts) >= 3:
            pages[f"{parts[1]}.{parts[2]}"] = rel.as_posix()
    return pages


def summary_html(run_id: str, outcomes: list[Outcome], pages: dict[str, str]) -> str:
    rows = []
    for s in summarize(outcomes):
        link = pages.get(s.suite)
        name = html.escape(s.suite)
        cell = f'<a href="{html.escape(link)}">{name}</a>' if link else name
        rows.append(
            f'<tr data-suite="{name}" data-status="{s.status}"><td>{cell}</td><td>{s.evaluated}</td>'
            f"<td>{s.passed}</td><td>{s.failed}</td><td>{s.not_evaluated}</td>"
            f'<td style="background:{_COLOURS.get(s.status, "#e2e3e5")}">{s.status}</td></tr>'
        )
    return (
        f'<section id="{SUMMARY_ID}" style="margin:1em 2em;font-family:sans-serif">'
        f"<h2>Quality run {html.escape(run_id)}</h2>"
        '<table class="table table-sm" border="1" cellpadding="4">'
        "<thead><tr><th>suite</th><th>evaluated</th><th>passed</th><th>failed</th><th>not evaluated</th>"
        "<th>status</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></section>"
    )


def add_summary(index: Path, run_id: str, outcomes: list[Outcome]) -> None:
    """Insert (or replace) the static summary right after ``<body ...>``."""
    text = index.read_text()
    start = text.find(f'<section id="{SUMMARY_ID}"')
    if start >= 0:
        end = text.index("</section>", start) + len("</section>")
        text = text[:start] + text[end:]
    block = summary_html(run_id, outcomes, validation_pages(index.parent))
    body = text.find("<body")
    at = text.index(">", body) + 1 if body >= 0 else 0
    index.write_text(text[:at] + block + text[at:])


def point_latest(root: Path, run_id: str) -> Path:
    """``latest`` -> ``<run_id>`` (a symlink replaced atomically) and ``LATEST`` with the run id."""
    link = root / "latest"
    tmp = root / f".latest-{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(run_id, target_is_directory=True)
    os.replace(tmp, link)
    (root / "LATEST").write_text(run_id + "\n")
    return link / "index.html"
