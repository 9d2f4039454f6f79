"""The package stays readable: its folders are rooms by concept, not piles, and its modules one
job each. Size is a smell, not a rule: no folder of `operator/benchfarm` but `suites/` (one parser
per suite, by design) holds more than 16 modules, and no module of the package or of the embedded
lab is over ~450 lines. A module that grows past that is split by job (as the scheduler, the seats
and the transitions were split from the runtime)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "benchfarm"
DEVLAB = ROOT / "devlab" / "benchfarm_devlab"
MAX_MODULES = 16
MAX_LINES = 450


def _folders(top: Path) -> dict[str, int]:
    return {str(d.relative_to(top)): n for d in [top, *top.rglob("*")]
            if d.is_dir() and (n := len(list(d.glob("*.py")))) > 0}


def test_no_folder_but_the_suites_holds_more_than_16_modules():
    folders = _folders(PACKAGE)
    assert folders["suites"] > MAX_MODULES     # the check counts what it means to
    crowded = {d: n for d, n in folders.items() if n > MAX_MODULES and d != "suites"}
    assert crowded == {}, f"group these by concept: {crowded}"


def test_no_module_of_the_package_or_the_lab_is_over_450_lines():
    modules = [*PACKAGE.rglob("*.py"), *DEVLAB.rglob("*.py")]
    assert len(modules) > 200
    long = {str(f.relative_to(ROOT)): n for f in sorted(modules)
            if (n := len(f.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"split these by job: {long}"
