"""A release's guide states what each board measured under (issue 56, item 5): the vendors'
"Evaluation Modules" table (Name | Description, as the seed guide's) filled from each column's
measured conditions, never typed by hand; and import-guide still reads the guide back without
taking that table for a benchmark."""

from __future__ import annotations

import docutils.core
import docutils.nodes
import pytest

from benchfarm.core.guides.guide import read_guide
from benchfarm.report.release import (
    Column,
    module_description,
    release_guide,
    release_html,
    release_md,
    release_rst,
)
from tests.unit.test_measured import record
from tests.unit.test_release_guide import columns

# the seed guide's board table (tests/data/guides' excerpts keep csv-tables only), its description
# over two lines
SEED = """
+----------------+---------------------------------------------------------------+
| Name           | Description                                                   |
+================+===============================================================+
| AM62Lx EVM     | AM62Lx Evaluation Module rev E1-1 with ARM running at 1.4GHz, |
|                | DDR data rate 1600 MT/S                                       |
+----------------+---------------------------------------------------------------+

Table:  Evaluation Modules
"""
ARM = "Linux vb-a53-0 6.1.0-56-arm64 #1 SMP Debian 6.1.0 aarch64 GNU/Linux"


def measured_columns() -> list[Column]:
    """The three boards of test_release_guide: the first measured at 1.0 GHz on a simulated
    source (one iteration throttled: invalid, not counted), the second with no conditions, the
    third missing."""
    cols = columns()
    doc = cols[0].doc
    doc["run"].update(deviceType="qemu-arm64-a53", uname=ARM)
    doc["records"] = [record(iteration=1, khz=1_000_000, simulated=True, watts=2.0),
                      record(iteration=2, khz=300_000, temp=95.0, valid=False, simulated=True),
                      record(iteration=3, khz=1_000_000, simulated=True, watts=2.5)]
    for r in doc["records"]:          # every snapshot at the board's frequency
        for snap in (r["conditions"]["before"], *r["conditions"]["during"],
                     r["conditions"]["after"]):
            khz = 300_000 if not r["conditions"]["valid"] else 1_000_000
            for p in snap["cpufreq"].values():
                p["curKHz"] = khz
    cols[1].doc["run"]["deviceType"] = "qemu-x86"
    cols[2] = Column("qemu-x86-gpu", None, "BootFailed: no prompt after 2 boards")
    return cols


def tables(rst: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every table docutils reads in `rst`: (header, rows) as text."""
    tree = docutils.core.publish_doctree(rst, settings_overrides={"report_level": 5})
    out = []
    for table in tree.findall(docutils.nodes.table):
        head = [[e.astext() for e in row.findall(docutils.nodes.entry)]
                for h in table.findall(docutils.nodes.thead)
                for row in h.findall(docutils.nodes.row)]
        body = [[e.astext() for e in row.findall(docutils.nodes.entry)]
                for b in table.findall(docutils.nodes.tbody)
                for row in b.findall(docutils.nodes.row)]
        out.append((head[0] if head else [], [[" ".join(c.split()) for c in r] for r in body]))
    return out


def test_each_board_is_described_from_what_it_measured_under():
    guide = release_guide("11.01", measured_columns())
    assert guide.modules == [
        ("qemu-x86", "qemu-arm64-a53 board qemu-x86-0 with ARM running at 1.0GHz, governor "
                     "performance, temperature 45-50 °C (simulated), average power 2.25 W"),
        ("qemu-arm64-a53", "qemu-x86 board qemu-arm64-a53-0: conditions not measured"),
        ("qemu-x86-gpu", "not measured (BootFailed: no prompt after 2 boards)")]


def test_the_table_is_the_seeds_title_and_header_and_docutils_reads_it():
    text = release_rst(release_guide("11.01", measured_columns()))
    assert "\nTable:  Evaluation Modules\n" in text and SEED.strip().splitlines()[-1] in text
    (seed,) = tables(SEED)
    assert seed[1] == [["AM62Lx EVM", "AM62Lx Evaluation Module rev E1-1 with ARM running at "
                                      "1.4GHz, DDR data rate 1600 MT/S"]]
    ours = [t for t in tables(text) if t[0] == seed[0]]
    assert seed[0] == ["Name", "Description"] and len(ours) == 1
    assert [r[0] for r in ours[0][1]] == ["qemu-x86", "qemu-arm64-a53", "qemu-x86-gpu"]
    assert ours[0][1][0][1].startswith("qemu-arm64-a53 board qemu-x86-0 with ARM running at "
                                       "1.0GHz")
    # before the benchmarks, as the vendors' "Read This First"
    assert text.index("Table:  Evaluation Modules") < text.index("System Benchmarks\n---")


def test_import_guide_reads_the_guide_back_without_taking_the_board_table_for_a_benchmark():
    cols = measured_columns()
    text = release_rst(release_guide("11.01", cols))
    imported = read_guide(text)
    assert imported.problems == []
    assert imported.boards == ["qemu-arm64-a53", "qemu-x86"]
    assert not any("Evaluation" in t.title for t in imported.tables)
    before = read_guide(release_rst(release_guide("11.01", columns()[:2])))
    assert {k: v.mean for k, v in imported.baseline("qemu-x86").items()} == \
        {k: v.mean for k, v in before.baseline("qemu-x86").items()}
    # written as a csv-table by another hand: still no benchmark, and no problem said
    csv = ('Evaluation Modules\n------------------\n\n.. csv-table:: Evaluation Modules\n'
           '   :header: "Name","Description"\n\n   "AM62Lx EVM","ARM running at 1.4GHz"\n\n')
    again = read_guide(csv + text)
    assert again.problems == [] and len(again.tables) == len(imported.tables)


def test_markdown_and_html_have_the_same_table():
    guide = release_guide("11.01", measured_columns())
    md = release_md(guide)
    assert "| Name | Description |\n|---|---|\n| qemu-x86 | qemu-arm64-a53 board " in md
    assert "\nTable: Evaluation Modules\n" in md
    page = release_html(guide)
    assert "<caption>Evaluation Modules</caption><tr><th>Name</th><th>Description</th></tr>" \
        in page and "<td>not measured (BootFailed: no prompt after 2 boards)</td>" in page


@pytest.mark.parametrize("khz, uname, said", [
    ((1_400_000, 1_400_000), ARM, "ARM running at 1.4GHz"),
    ((600_000, 1_000_000), ARM, "ARM running at 0.6-1.0GHz"),
    ((1_250_000, 1_250_000), "Linux x 6.1 x86_64 GNU/Linux", "x86 running at 1.25GHz"),
    ((300_000, 600_000), "Linux x 6.1 riscv64 GNU/Linux", "RISC-V running at 300-600MHz"),
    ((800_000, 800_000), None, "CPU running at 800MHz"),
])
def test_the_frequency_range_is_said_as_the_guides_say_it(khz, uname, said):
    recs = [record(iteration=i + 1, watts=None) for i in range(2)]
    for r, k in zip(recs, khz, strict=True):
        for snap in (r["conditions"]["before"], *r["conditions"]["during"],
                     r["conditions"]["after"]):
            for p in snap["cpufreq"].values():
                p["curKHz"] = k
    doc = {"run": {"deviceType": "dt", "board": "b-0", "uname": uname}, "records": recs}
    text = module_description(doc)
    assert text.startswith(f"dt board b-0 with {said}, governor performance, temperature 45-50 °C")
    assert "simulated" not in text and "power" not in text
