"""Every link between the docs leads somewhere: a relative link in README.md
or docs/*.md names a file that exists and, with a ``#fragment``, a heading of
that page (as GitHub makes its anchors). docs/observability.md sent readers
to a payloads.md that never existed, and docs/schedules.md to a benchmarks
heading that had been renamed; nothing noticed."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings (a repeated one gets -1, -2...),
    and any explicit ``<a id=...>``."""
    text = _FENCE.sub("", page.read_text())
    seen: Counter[str] = Counter()
    found = set(re.findall(r'<a (?:id|name)="([^"]+)"', text))
    for heading in re.findall(r"^#+ (.*)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return found


def test_every_relative_link_of_the_docs_leads_to_a_page_and_heading() -> None:
    broken = []
    for page in PAGES:
        for link in _LINK.findall(_FENCE.sub("", page.read_text())):
            if re.match(r"[a-z]+:", link):  # http:, https:, mailto:
                continue
            path, _, fragment = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                broken.append(f"{page.relative_to(ROOT)}: {link} (no such file)")
            elif fragment and target.suffix == ".md" and fragment not in anchors(target):
                broken.append(f"{page.relative_to(ROOT)}: {link} (no such heading)")
    assert not broken, "\n".join(broken)
