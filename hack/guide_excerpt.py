#!/usr/bin/env python3
"""Cuts a vendor performance guide (RST) down to its data: section titles and `csv-table` blocks.

The tests need a guide's tables, not its prose, and the repository may carry only the former:
`python hack/guide_excerpt.py GUIDE.rst > tests/data/guides/NAME.rst` keeps every section title
(with its underline), `Table:` caption and `.. csv-table::` directive with its options and rows,
nothing else. `--source "REPO PATH @ COMMIT"` puts an RST comment naming the source first:
`python hack/guide_excerpt.py GUIDE.rst --source "owner/repo path @ commit" > NAME.rst`.
Every line of a csv-table's body is kept, so no row is ever dropped.
"""

from __future__ import annotations

import re
import sys

_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+])\1{2,}\s*$")


def excerpt(text: str, source: str = "") -> str:
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and not _UNDERLINE.match(line) and _UNDERLINE.match(nxt):
            out += ["", line.rstrip(), nxt.rstrip()]
            i += 2
            continue
        if line.startswith("Table:"):
            out += ["", line.rstrip()]
        elif line.lstrip().startswith(".. csv-table::"):
            out += ["", line.rstrip()]
            i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i][:1] in " \t"):
                out.append(lines[i].rstrip())
                i += 1
            continue
        i += 1
    body = "\n".join(re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip().splitlines()) + "\n"
    return f".. source: {source}\n\n{body}" if source else body


if __name__ == "__main__":
    args = sys.argv[1:]
    source = ""
    if "--source" in args:
        at = args.index("--source")
        source = args[at + 1]
        del args[at:at + 2]
    sys.stdout.write(excerpt(open(args[0], encoding="utf-8", errors="replace").read(), source))
