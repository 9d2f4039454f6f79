"""The tutorials of docs/ run as written: every command after a `$ ` prompt in a ```console block
of a tutorial page is run, in order, by bash from the repository's top directory against the
embedded lab (`source .benchfarm/env` as the page says), and the tutorial passes when every one
exits 0. So a page cannot drift from the product: a renamed option, a field the API server
refuses, a condition that no longer comes fail here.

`make test` runs the first run and the first lease (a minute or two); the campaign over two board
types and the A/B of two arm64 kernels take several minutes each and are `full` variants
(BENCHFARM_FULL=1: make test-full).
"""

from __future__ import annotations

import os
import subprocess

import pytest

import benchfarm_devlab as devlab
from tests.docs_pages import REPO, tutorial_commands, tutorial_script

pytestmark = [pytest.mark.stack, pytest.mark.timeout(3600)]


def _run(page: str, timeout: float) -> None:
    assert tutorial_commands(page), f"docs/tutorials/{page}.md has no console commands"
    script = tutorial_script(page)
    if devlab.STATE != REPO / ".benchfarm":      # a lab kept elsewhere (BENCHFARM_STATE)
        script = script.replace("source .benchfarm/env", f"source {devlab.STATE / 'env'}")
    res = subprocess.run(["bash", "-c", script], cwd=REPO, env=dict(os.environ), text=True,
                         capture_output=True, timeout=timeout)
    assert res.returncode == 0, (f"docs/tutorials/{page}.md: a command failed "
                                 f"(exit {res.returncode})\n--- output\n{res.stdout[-6000:]}"
                                 f"\n--- errors\n{res.stderr[-4000:]}")


def test_the_first_run_tutorial_runs_as_written(lab, operator):
    _run("first-run", timeout=900)


def test_the_first_lease_tutorial_runs_as_written(lab, operator):
    _run("first-lease", timeout=600)


@pytest.mark.full
def test_the_first_campaign_tutorial_runs_as_written(lab, operator):
    _run("first-campaign", timeout=1500)


@pytest.mark.full
def test_the_first_ab_tutorial_runs_as_written(lab, operator):
    _run("first-ab", timeout=2100)
