"""Who is to blame, as the session decides it (`session.blame`) and the operator reads it: a
fault while the tenant's code runs is the board's only once the board's own image fails too."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchfarm.api.outcomes import (
    FINISHED,
    BoardFaultKind,
    HandBack,
    Phase,
    Reason,
    SessionEnd,
    fault_words,
)
from benchfarm.core import steps as st
from benchfarm.errors import BoardBusy, BoardFault, InfraError, Outage, Party, RunError
from benchfarm.lab.session import Cancelled
from benchfarm.session.blame import Blame, Settled, tenant_may_have_done, verdict


@pytest.mark.parametrize("exc,settled,hand_back,touches", [
    (None, Settled.completed, None, True),
    (Cancelled("run cancelled"), Settled.cancelled, None, True),
    (BoardFault("no prompt", reason="BootTimeout"), Settled.handed_back, HandBack.board_fault, True),
    (BoardBusy("held by desk/alice"), Settled.handed_back, HandBack.busy, False),
    (RunError("crashed it", reason=Reason.run_crashed_board), Settled.failed, None, True),
    (InfraError("PDU down", reason="PowerFailed"), Settled.handed_back, HandBack.lab_fault, True),
    (Outage("store", party=Party.store), Settled.handed_back, HandBack.lab_fault, True),
    (KeyError("bug"), Settled.internal, None, True)])
def test_every_way_the_steps_end_has_one_decision(exc, settled, hand_back, touches):
    v = verdict(exc)
    assert (v.settled, v.hand_back, v.touches_board) == (settled, hand_back, touches)


def test_only_a_board_fault_is_the_boards_and_a_crashed_run_proves_the_board_fine():
    assert {r for r in Reason if r.board_is_fine} == {
        Reason.completed, Reason.suites_failed, Reason.run_crashed_board,
        Reason.software_boot_failed}
    assert FINISHED == {Phase.succeeded, Phase.failed, Phase.cancelled}
    assert all(p.finished == (p in FINISHED) for p in Phase)


def test_a_session_end_round_trips_through_the_status_as_plain_json():
    end = SessionEnd(attempt=2, outcome=HandBack.busy, reason="BoardBusy", message="held")
    raw = end.model_dump(mode="json")
    assert raw["outcome"] == "Busy" and isinstance(raw["outcome"], str)
    assert SessionEnd.model_validate(raw) == end
    assert f"{Phase.running}" == "Running" and str(Reason.run_crashed_board) == "RunCrashedBoard"


# -- evidence: the board's own image, never what a tenant's code printed ----------------------
ONE_SIDED = st.plan_steps(2, ["hello", "sleep", "lp"], 2, 0)
AB = st.plan_steps(1, ["hello"], 1, 0, sides=2)
LAB_DRIVEN = {2}          # "lp": the low-power suite, benchfarm's own commands


def step(plan, name):
    return next(s for s in plan if s.name == name)


@pytest.mark.parametrize("name,tenant_sides,own_booted,tenants", [
    # the board's own image: its boots and its provenance probe are the lab's
    ("boot-001", set(), False, False),
    ("provenance", set(), False, False),
    # the tenant's suites, whatever the board runs
    ("it-001-hello", set(), False, True),
    ("it-002-sleep", set(), True, True),
    # a lab step after a tenant suite on this boot: it may have left something behind ...
    ("it-001-lp", set(), False, True),
    # ... unless the board's own image was booted again since
    ("it-001-lp", set(), True, False),
    # the tenant's kernel or initramfs runs: its provenance probe and every step on it
    ("provenance", {""}, False, True),
    ("provenance", {""}, True, True),
    ("it-001-lp", {""}, True, True),
    # a boot is judged by what the bootloader had loaded (DeployedBootFailed), not here
    ("boot-002", {""}, False, False),
])
def test_a_fault_is_the_tenants_to_answer_for_while_its_code_runs(name, tenant_sides, own_booted,
                                                                  tenants):
    assert tenant_may_have_done(step(ONE_SIDED, name), ONE_SIDED, tenant_sides, LAB_DRIVEN,
                                own_image_booted=own_booted) is tenants


def test_ab_runs_each_side_on_its_own_software():
    """Side a on the board's own image (no software), side b on the tenant's: b's provenance
    probe is the tenant's to answer for, a's the board's."""
    assert not tenant_may_have_done(step(AB, "provenance-a"), AB, {"b"}, set())
    assert tenant_may_have_done(step(AB, "provenance-b"), AB, {"b"}, set())
    assert tenant_may_have_done(step(AB, "it-001-a-hello"), AB, {"b"}, set())
    assert not tenant_may_have_done(step(AB, "it-001-b-boot"), AB, {"b"}, set())


class FakeStatus:
    def __init__(self):
        self.said = []

    def progress(self, text, *args, **kwargs):
        self.said.append(text)

    def event(self, type_, reason, message):
        self.said.append(f"{reason}: {message}")


def ctx(*, software, suites=("hello", "lp")):
    sides = [("", "team-b-initramfs" if software else "", object() if software else None)]
    suite_specs = [SimpleNamespace(name=n, suite="low-power" if n == "lp" else "shell")
                   for n in suites]
    plan = st.plan_steps(1, list(suites), 1, 0)
    return SimpleNamespace(namespace="team-b", name="r", place="vb-a53-0", status=FakeStatus(),
                           suites=suite_specs, sides=lambda: sides, plan=lambda: plan)


def blame_with(c, own_image_boots=True):
    booted = []

    def boot_own():
        booted.append(1)
        if not own_image_boots:
            raise BoardFault("no prompt 90 s after power-on", reason="BootTimeout")
    return Blame(c, boot_own), booted


PANIC = BoardFault("vb-a53-0: the board went down while a command ran: Kernel panic - not "
                   "syncing: from the tenant's uname", reason="BoardCrashed")


def test_a_panic_marker_from_tenant_software_in_its_provenance_probe_is_the_runs():
    """The tenant's initramfs prints a panic marker when the provenance probe runs `uname`: the
    board's own image boots to its prompt (a health check), the probe is done once more, and
    down a second time it is the run's (RunCrashedBoard): nothing to hand back, no board
    charged, and the console line stays in the run's own status."""
    c = ctx(software=True)
    blame, booted = blame_with(c)
    probe = step(c.plan(), "provenance")
    assert blame.judge(probe, PANIC) is None and booted == [1]
    assert blame.judge(probe, PANIC) is None and booted == [1, 1]
    err = blame.run_crashed(probe, PANIC)
    assert isinstance(err, RunError) and err.reason == Reason.run_crashed_board
    assert verdict(err).settled == Settled.failed and verdict(err).hand_back is None
    assert "the provenance probe (step provenance) on the run's software team-b-initramfs " \
        "took the board down twice" in err.message
    assert "Kernel panic" in err.message               # the run's own status has the line
    assert any("health check" in s for s in c.status.said)


def test_the_board_is_charged_only_when_its_own_image_then_fails_too():
    c = ctx(software=True)
    blame, booted = blame_with(c, own_image_boots=False)
    fault = blame.judge(step(c.plan(), "provenance"), PANIC)
    assert isinstance(fault, BoardFault) and booted == [1]
    assert fault.reason == "BootTimeout"     # the board's own failure is the one charged
    assert verdict(fault).hand_back == HandBack.board_fault


def test_without_tenant_software_the_boards_own_image_failing_is_the_boards():
    """The provenance probe on the board's own image (before any suite ran): the board's. A
    lab step after a tenant suite is checked first, and after the board's own image booted
    again a second fault of it is the board's."""
    c = ctx(software=False)
    blame, booted = blame_with(c)
    assert blame.judge(step(c.plan(), "provenance"), PANIC) is PANIC and booted == []
    lp = step(c.plan(), "it-001-lp")
    assert blame.judge(lp, PANIC) is None and booted == [1]
    assert blame.judge(lp, PANIC) is PANIC and booted == [1]
    hello = step(c.plan(), "it-001-hello")             # a tenant suite: its own output
    assert blame.judge(hello, PANIC) is None and blame.judge(hello, PANIC) is None
    assert "suite hello (step it-001-hello) took the board down twice" in \
        blame.run_crashed(hello, PANIC).message


def test_every_board_fault_kind_has_the_labs_words_and_nothing_else_passes():
    assert {k.summary for k in BoardFaultKind} and all(k.summary for k in BoardFaultKind)
    assert BoardFaultKind.of("BootTimeout") is BoardFaultKind.boot_timeout
    assert BoardFaultKind.of("Kernel panic - not syncing") is BoardFaultKind.other
    assert fault_words("ShellLost").startswith("ShellLost: its shell did not come back")
    assert fault_words("PowerFailed") == "PowerFailed"          # the lab's own code
    assert fault_words("HealthCheckLost") == "HealthCheckLost"
    for tenant in ("Kernel panic - not syncing", "x" * 65, "pänic", "a:b"):
        assert fault_words(tenant) == "BoardFault: a board fault"


def test_the_errors_default_board_fault_reasons_are_kinds_of_board_fault():
    """`errors` sits below `api` and spells its two defaults: they are kinds all the same."""
    from benchfarm.errors import DeployedBootFailed
    assert BoardFaultKind.of(BoardFault.reason) is BoardFaultKind.other
    assert BoardFaultKind.of(DeployedBootFailed.reason) is BoardFaultKind.boot_failed
