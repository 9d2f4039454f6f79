"""Tenant text as each report format embeds it: what a report shows (metric names, a job's name,
an error's message, a kernel's uname) came from a tenant's plan or board, so a table cell, a
heading or a fact is escaped for the format it lands in, never pasted raw.

- Markdown (GitHub/GitLab flavour): `|` would end a table cell and `<` start HTML the viewer
  renders, `[` a link; they are backslash-escaped or written as entities, a backslash doubled.
- RST csv-table: a cell is double-quoted with its quotes doubled (as the csv module that
  core.guides.guide reads it back with expects); an RST line is one line, since a line break in a cell
  or a title would end the directive and start whatever RST the tenant wrote after it.
- RST body text (report.conditions' list-tables) is one line, backslash-escaped where inline
  markup or (first on the line) a list or a directive could start.
- HTML goes through jinja2's autoescape (report.html) or html.escape (report.release).
"""

from __future__ import annotations

from collections.abc import Iterable

# every line break str.splitlines knows, and the other C0 controls: one space each
_BREAKS = {c: " " for c in (*range(0x20), 0x7F, 0x85, 0x2028, 0x2029) if c != 0x09}
_MARKDOWN = {ord("\\"): "\\\\", ord("|"): "\\|", ord("["): "\\[", ord("]"): "\\]",
             ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;", **_BREAKS}
# what starts RST inline markup (emphasis, literals, roles, references, substitutions,
# footnotes, links, standalone URLs); a line's first character, if punctuation, starts a list,
# an enumerator or a directive and is escaped too
_RST = {ord(c): "\\" + c for c in "\\*`_|[]:<>"}
_PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"


def line(text: object) -> str:
    """One line: line breaks and control characters as spaces."""
    return str(text).translate(_BREAKS)


def md(text: object) -> str:
    """Text for a Markdown table cell, heading or list item."""
    return str(text).translate(_MARKDOWN)


def md_row(cells: Iterable[object]) -> str:
    return "| " + " | ".join(md(c) for c in cells) + " |"


def rst_text(text: object) -> str:
    """RST body text on one line (a list-table cell, a paragraph, a title), backslash-escaped
    where markup could start: inert, whatever markup, role, directive or list the tenant wrote."""
    text = line(text).strip().translate(_RST)
    first = text.split(maxsplit=1)[0] if text else ""
    enumerator = first[-1:] in (".", ")") and (first[:-1].isalnum() or first[:-1] == "#")
    if first and (enumerator or first[0] in _PUNCTUATION and first[0] != "\\"):
        return "\\" + text     # escaped, it starts no list, enumerator or directive
    return text


def csv_row(cells: Iterable[object]) -> str:
    """An RST csv-table row (or its :header: value): each cell quoted, its quotes doubled."""
    return ",".join('"' + line(c).replace('"', '""') + '"' for c in cells)
