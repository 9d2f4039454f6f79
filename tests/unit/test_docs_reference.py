"""The documentation cannot go stale: its reference pages are generated from the code (CRD
fields, CLI options, helm values, metrics, event reasons), and these tests fail when the code has
something the docs do not describe (a CRD field, a CLI option, a BENCHFARM_* setting), when the
docs describe a setting no code reads, when the README grows past 200 lines or links to a file
that is not there, or when a tutorial's commands no longer parse."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from tests.docs_pages import DOCS, REPO, TUTORIALS, reference, tutorial_commands, tutorial_script

ref = reference()


def test_every_crd_field_has_a_description():
    fields = ref.crd_fields()
    assert len(fields) > 150          # every kind's spec and status, nested fields included
    undocumented = [f"{f.kind}.{f.path}" for f in fields if not f.description]
    assert not undocumented, (
        "CRD fields without a description: give the pydantic model a Field(description=...) "
        f"(or the status schema in api/crdgen.py a description): {undocumented}")


def test_every_cli_command_and_option_has_a_description():
    commands = ref.cli_commands()
    names = {name for name, _, _ in commands}
    for expected in ("benchfarm operator", "benchfarm session run", "benchfarm report",
                     "benchfarm compare", "benchfarm lease", "benchfarm history",
                     "benchfarm results reindex", "benchfarm check", "benchfarm web"):
        assert expected in names
    missing = [f"{name}: {o.names}" for name, _, opts in commands for o in opts if not o.help]
    missing += [name for name, help_, _ in commands if name != "benchfarm" and not help_]
    assert not missing, f"commands or options without help (argparse help=...): {missing}"


def test_every_setting_the_code_reads_is_described_and_no_other():
    in_code = ref.settings_in_code()
    documented = ref.settings_documented()
    assert len(in_code) > 40
    undocumented = sorted(set(in_code) - set(documented))
    assert not undocumented, (
        f"BENCHFARM_* variables the code spells that neither benchfarm.settings.Settings nor "
        f"docs/reference/settings.md describes: {undocumented} (spelled in "
        f"{ {k: in_code[k] for k in undocumented} })")
    stale = sorted(k for k in set(documented) - set(in_code) if k.startswith("BENCHFARM_"))
    assert not stale, f"settings or docs/reference/settings.md describe variables no code " \
                      f"spells: {stale}"
    assert all(len(d) > 10 for d in documented.values()), "a description of a few words at least"


def test_the_generated_pages_list_every_field_option_setting_metric_and_reason(tmp_path):
    ref.generate(tmp_path)
    crds = (tmp_path / "crds.md").read_text()
    for f in ref.crd_fields():
        assert f"`{f.path}`" in crds
    cli = (tmp_path / "cli.md").read_text()
    for name, _, opts in ref.cli_commands():
        if name != "benchfarm":
            assert f"## `{name}`" in cli
        for o in opts:
            assert o.names in cli
    where = (tmp_path / "settings-where.md").read_text()
    for name in ref.settings_in_code():
        assert f"`{name}`" in where
    obs = (tmp_path / "observability.md").read_text()
    metrics = ref.metrics()
    assert {"benchfarm_queue_depth", "benchfarm_runs_finished_total"} <= {m[0] for m in metrics}
    for name, _, help_, _ in metrics:
        assert help_ and f"`{name}`" in obs
    reasons = {r for r, _, _ in ref.event_reasons()}
    assert {"Scheduled", "BootRetried", "SuitesFailed", "RunCrashedBoard", "Granted"} <= reasons
    for r in reasons:
        assert f"`{r}`" in obs
    meanings = ref.reason_meanings()         # the comments of benchfarm.api's enums
    assert "board's own image booted again" in meanings["RunCrashedBoard"]
    assert meanings["LeaseTooLong"] in obs
    helm = (tmp_path / "helm-values.md").read_text()
    values = {v.path: v for v in ref.helm_values()}
    assert "sessions.warm" in values and "labgrid.coordinator" in values
    assert values["replicas"].description.startswith("Operator replicas")
    for path in values:
        assert f"`{path}`" in helm
    schema = (tmp_path / "results-schema.md").read_text()
    assert "## `results`" in schema and "`run_uid`" in schema and "results_ns_series" in schema


def test_the_readme_is_short_and_its_links_lead_to_files():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert "make demo" in readme and "make test" in readme
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    local = [link for link in links if not re.match(r"^[a-z]+://", link)]
    assert len(local) > 10
    for link in local:
        assert (REPO / link.split("#")[0]).is_file(), f"README links to {link}: no such file"
    # one click from the README to putting one's own boards in
    assert "](docs/howto/add-boards.md)" in readme


def test_every_page_in_docs_is_in_the_site_and_every_tutorial_runs_commands():
    index = (DOCS / "index.md").read_text()
    for page in sorted(DOCS.rglob("*.md")):
        rel = page.relative_to(DOCS).with_suffix("").as_posix()
        if rel in ("index",) or rel.startswith("_"):
            continue
        assert rel in index, f"docs/{rel}.md is in no toctree of docs/index.md"
    for page in TUTORIALS:
        commands = tutorial_commands(page)
        assert len(commands) >= 3, page
        assert commands[0] == "source .benchfarm/env", page
        res = subprocess.run(["bash", "-n"], input=tutorial_script(page), text=True,
                             capture_output=True)
        assert res.returncode == 0, f"{page}: {res.stderr}"


def test_a_here_document_in_a_tutorial_is_one_command():
    cmds = tutorial_commands("first-run")
    apply = [c for c in cmds if c.startswith("kubectl apply -f - <<EOF")]
    assert len(apply) == 1
    body = yaml.safe_load(apply[0].split("\n", 1)[1].rsplit("EOF", 1)[0])
    assert body["kind"] == "BenchmarkRun" and body["spec"]["plan"] == "demo"


def test_the_grafana_dashboard_reads_only_the_schema():
    dash = json.loads((DOCS / "howto" / "grafana-dashboard.json").read_text())
    tables = {t: {c for c, _, _, _ in cols} for t, cols, _ in ref.results_schema()}
    sqls = [v["query"] for v in dash["templating"]["list"] if v["type"] == "query"]
    sqls += [t["rawSql"] for p in dash["panels"] for t in p["targets"]]
    assert len(sqls) >= 6
    columns = set().union(*tables.values())
    for sql in sqls:
        for table in re.findall(r"\b(?:FROM|JOIN)\s+(\w+)", sql):
            assert table in tables or table == "unnest", sql
        for col in re.findall(r"\b(?:r|c)\.(\w+)", sql):
            assert col in columns, (col, sql)
        for col in re.findall(r"\b(\w+)\s*=\s*'\$", sql):
            assert col in columns, (col, sql)


def test_the_link_check_finds_a_broken_link_an_anchor_and_a_remote_script(tmp_path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("check_docs_links",
                                                  REPO / "hack" / "check_docs_links.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (tmp_path / "a").mkdir()
    (tmp_path / "index.html").write_text(
        '<a href="a/b.html#there">ok</a><a href="a/b.html#gone">x</a><a href="nope.html">y</a>'
        '<a href="https://example.org/">remote page: fine</a>'
        '<script src="https://cdn.example.org/x.js"></script>')
    (tmp_path / "a" / "b.html").write_text('<h1 id="there">b</h1><a href="../index.html">up</a>')
    problems = mod.check(tmp_path)
    assert len(problems) == 3, problems
    assert any("#gone" in p for p in problems) and any("nope.html" in p for p in problems)
    assert any("network" in p for p in problems)


def test_make_test_builds_the_docs_before_pytest():
    make = (REPO / "Makefile").read_text()
    test = make[make.index("\ntest:"):]
    test = test[:test.index("\n\n")]
    assert test.index("docs") < test.index("pytest")
    docs = make[make.index("\ndocs:"):]
    assert "sphinx-build -W --keep-going" in docs[:400] and "check_docs_links.py" in docs[:400]
    assert "docs/_build/" in (REPO / ".gitignore").read_text()


@pytest.mark.parametrize("pin", ["sphinx==", "myst-parser==", "furo=="])
def test_the_docs_toolchain_is_pinned_like_the_other_dev_dependencies(pin):
    assert pin in (REPO / "pyproject.toml").read_text()
    assert pin.replace("sphinx==", "Sphinx==") in (REPO / "constraints.txt").read_text()
