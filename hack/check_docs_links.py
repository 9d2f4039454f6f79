#!/usr/bin/env python3
"""Checks the built documentation (docs/_build/html): every local href and src of every page
points at a file that exists, and every #anchor at an id on that page; and no page loads a script
or a stylesheet from the network (the site is served as it is built, no CDN).

`make docs` runs it after sphinx-build. Exit 1 with one line per broken link.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[1] / "docs" / "_build" / "html"


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[tuple[str, str, str]] = []     # (tag, attribute, value)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name"):
                self.ids.add(value)
            if name in ("href", "src"):
                self.links.append((tag, name, value))


def check(root: Path = ROOT) -> list[str]:
    pages: dict[Path, Page] = {}
    for path in sorted(root.rglob("*.html")):
        page = Page()
        page.feed(path.read_text(errors="replace"))
        pages[path.resolve()] = page
    problems = []
    for path, page in pages.items():
        rel = path.relative_to(root.resolve())
        for tag, attr, value in page.links:
            url = urlsplit(value)
            if url.scheme in ("http", "https") or value.startswith("//"):
                if tag in ("script", "link", "img", "iframe"):
                    problems.append(f"{rel}: <{tag} {attr}={value!r}> loads from the network")
                continue
            if url.scheme:          # mailto:, data:, javascript:
                continue
            target = path if not url.path else (path.parent / unquote(url.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                problems.append(f"{rel}: {value} -> no such file")
                continue
            if url.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else set()
                if unquote(url.fragment) not in ids:
                    problems.append(f"{rel}: {value} -> no anchor #{url.fragment}")
    return problems


def main() -> int:
    if not ROOT.is_dir():
        print(f"no built site at {ROOT}: run sphinx-build first", file=sys.stderr)
        return 2
    problems = check()
    for p in problems:
        print(p)
    pages = len(list(ROOT.rglob("*.html")))
    if problems:
        print(f"{len(problems)} broken link(s) in {pages} page(s)")
        return 1
    print(f"links ok: {pages} page(s), no broken local link, nothing loaded from the network")
    return 0


if __name__ == "__main__":
    sys.exit(main())
